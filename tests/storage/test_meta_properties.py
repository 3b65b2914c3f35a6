"""meta.properties as Kafka's MetaProperties reads and writes it (the files quoted below are what
Kafka 4.3.1's kafka-storage wrote)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from grete.storage import meta_properties as mp
from grete.storage.files import uuid_to_kafka
from grete.storage.meta_properties import MetaProperties, MetaPropertiesError

KAFKA_V1 = ("#\n#Sat Nov 28 17:53:12 UTC 2026\nnode.id=1\ndirectory.id=6Hq06q7VWEkU2MGX-VtrJQ\nversion=1\n"
            "cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n")
DIRECTORY_ID = mp.parse_uuid("6Hq06q7VWEkU2MGX-VtrJQ")


def test_writes_what_kafka_writes(tmp_path: Path) -> None:
    mp.write_meta_properties(tmp_path, MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qg", 1, DIRECTORY_ID))
    text = (tmp_path / "meta.properties").read_text("latin-1")
    first, date, *rest = text.split("\n")
    assert first == "#" and re.fullmatch(r"#\w{3} \w{3} \d\d \d\d:\d\d:\d\d \S+ \d{4}", date)
    assert rest == KAFKA_V1.split("\n")[2:]  # Kafka's key order: its hash table's


def test_version_0_order_and_reading(tmp_path: Path) -> None:
    meta = MetaProperties(0, "MkU3OEVBNTcwNTJENDM2Qg", 3)
    assert list(mp.java_hash_order(meta.to_properties())) == ["broker.id", "version", "cluster.id"]
    mp.write_meta_properties(tmp_path, meta)
    assert mp.read_meta_properties(tmp_path) == meta
    (tmp_path / "meta.properties").write_text("cluster.id=abc\n")  # no version: 0, no broker id
    assert mp.read_meta_properties(tmp_path) == MetaProperties(0, "abc")


def test_reads_kafkas_file_and_java_properties_syntax(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(KAFKA_V1)
    meta = mp.read_meta_properties(tmp_path)
    assert meta == MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qg", 1, DIRECTORY_ID)
    assert meta.describe() == ("{cluster.id=MkU3OEVBNTcwNTJENDM2Qg, directory.id=6Hq06q7VWEkU2MGX-VtrJQ, "
                               "node.id=1, version=1}")
    (tmp_path / "meta.properties").write_text("! comment\n  version : 1\nnode.id 7\ncluster.id=a\\=b\\\n  c\n")
    assert mp.read_meta_properties(tmp_path) == MetaProperties(1, "a=bc", 7)
    assert mp.read_meta_properties(tmp_path / "missing") is None


def test_escapes_like_properties_store() -> None:
    text = mp.store_properties({"cluster.id": " a:b=c#"}, now=0)
    assert text.splitlines()[2] == "cluster.id=\\ a\\:b\\=c\\#"
    assert mp.load_properties(text) == {"cluster.id": " a:b=c#"}


@pytest.mark.parametrize("body, reason", [
    ("version=1\nnode.id=1\n", "cluster.id was not found."),
    ("version=1\ncluster.id=x\n", "Failed to find node.id"),
    ("version=1\ncluster.id=x\nnode.id=one\n", "Unable to read node.id as a base-10 number."),
    ("version=7\nnode.id=1\ncluster.id=x\n", "Unknown meta.properties version number 7"),
    ("version=0\nbroker.id=1\ndirectory.id=abc\n",
     "Unable to read directory.id as a Uuid: Input string `abc` decoded as 2 bytes, which is not equal to the "
     "expected 16 bytes of a base64-encoded UUID"),
])
def test_kafkas_reasons_with_the_path(tmp_path: Path, body: str, reason: str) -> None:
    (tmp_path / "meta.properties").write_text(body)
    with pytest.raises(MetaPropertiesError) as info:
        mp.read_meta_properties(tmp_path)
    assert str(info.value) == f"Error loading {tmp_path / 'meta.properties'}: {reason}"
    assert info.value.path == str(tmp_path / "meta.properties")


def test_ensemble_checks(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    one = MetaProperties(1, "c1", 1, DIRECTORY_ID)
    mp.check_ensemble({a: one}, "c1", 1)
    with pytest.raises(MetaPropertiesError, match=re.escape(f"Invalid cluster.id in: {a}/meta.properties. "
                                                            "Expected c2, but read c1")):
        mp.check_ensemble({a: one}, "c2", 1)
    with pytest.raises(MetaPropertiesError, match=f"Stored node id 1 doesn't match previous node id 2 in {a}"):
        mp.check_ensemble({a: one}, None, 2)
    with pytest.raises(MetaPropertiesError, match="Duplicate directory ID Optional.6Hq06q7VWEkU2MGX-VtrJQ. found"):
        mp.check_ensemble({a: one, b: one}, None, None)


def test_new_directory_id_skips_dash_reserved_and_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    dash = mp.parse_uuid("-" + "A" * 21)
    reserved = uuid.UUID(int=1)
    good = uuid.uuid4()
    while uuid_to_kafka(good).startswith("-"):
        good = uuid.uuid4()
    draws = iter([dash.bytes, reserved.bytes, good.bytes, DIRECTORY_ID.bytes])
    monkeypatch.setattr("os.urandom", lambda n: next(draws))
    assert mp.new_directory_id(taken=[good]) == DIRECTORY_ID


def test_java_string_hash() -> None:
    assert mp.java_string_hash("hello") == 99162322
