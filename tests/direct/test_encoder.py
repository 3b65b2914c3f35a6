"""The direct producer's C batch encoder against its Python twin (the reference), Kafka's decoder and
the crc32c package; and its fallback when no compiler can build it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grete.direct import encoder
from grete.protocol.records.batch import BATCH_OVERHEAD, RecordBatch
from grete.protocol.records.record import decode_records

C = encoder.native_module()

_nullable = st.none() | st.binary(max_size=200)
_names = st.text(max_size=20) | st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), max_size=4)
_headers = st.none() | st.lists(st.tuples(_names, _nullable), max_size=4)
_record = st.tuples(
    st.integers(-(1 << 62), 1 << 62),  # timestamp delta: negative, small, multi-byte
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=20000),  # lengths whose varints take one to three bytes
    _headers)


def _encode(impl: Any, records: list[tuple[int, Any, Any, Any]], base_ts: int) -> bytearray:
    batch = bytearray(BATCH_OVERHEAD)
    for i, (delta, key, value, headers) in enumerate(records):
        assert impl.append(batch, delta, i, key, value, headers) == len(batch)
    return impl.seal(batch, len(records), base_ts, base_ts + max(d for d, *_ in records))


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12), st.integers(0, 1 << 60))
def test_c_batches_equal_python_batches_and_decode(records: list[tuple[int, Any, Any, Any]], base_ts: int) -> None:
    c_batch = _encode(C, records, base_ts)
    assert c_batch == _encode(encoder.PYTHON, records, base_ts)
    batch = RecordBatch(c_batch, 0)
    assert batch.crc_ok() and batch.crc == crc32c.crc32c(bytes(c_batch[21:]))
    decoded = decode_records(batch)
    assert [(r.offset_delta, r.timestamp_delta, r.key, r.value) for r in decoded] == [
        (i, delta, key, value) for i, (delta, key, value, _) in enumerate(records)]
    def raw(headers: Any) -> list[tuple[bytes, bytes | None]]:
        return [(name.encode("utf-8", "surrogateescape"), value) for name, value in headers or []]

    assert [raw(r.headers) for r in decoded] == [raw(headers) for *_, headers in records]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 7))
def test_crc32c_matches_the_crc32c_package_at_any_alignment(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)):]
    expected = crc32c.crc32c(bytes(view))
    assert C.crc32c(view) == expected
    assert C.crc32c_portable(view) == expected


def test_bytes_like_keys_and_values_encode_as_bytes() -> None:
    plain = _encode(C, [(0, b"key", b"value", [("h", b"v")])], 5)
    assert _encode(C, [(0, bytearray(b"key"), memoryview(b"value"), [("h", bytearray(b"v"))])], 5) == plain


@pytest.mark.parametrize("args", [
    (0, 0, 42, b"v", None),             # a key that is not bytes-like
    (0, 0, None, "text", None),         # str value: the producer encodes str first
    (0, 0, None, b"v", [("h",)]),       # a header that is not a pair
    (0, 0, None, b"v", [(b"h", b"v")]),  # a header name that is not str
    (0, 1 << 31, None, b"v", None),     # offset delta outside int32
    (1 << 63, 0, None, b"v", None),     # timestamp delta outside int64
])
def test_bad_input_raises_and_leaves_the_batch_alone(args: tuple[Any, ...]) -> None:
    batch = bytearray(BATCH_OVERHEAD)
    C.append(batch, 0, 0, b"k", b"v", None)
    before = bytes(batch)
    with pytest.raises((TypeError, OverflowError)):
        C.append(batch, *args)
    assert batch == before


def test_seal_refuses_a_batch_without_records() -> None:
    with pytest.raises(ValueError):
        C.seal(bytearray(BATCH_OVERHEAD), 0, 0, 0)
    with pytest.raises(ValueError):
        C.seal(bytearray(10), 1, 0, 0)


def _select_in_child(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    code = "from grete.direct import encoder; print(encoder.select().name)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "GRETE_CACHE": str(tmp_path), **env})


def test_the_producer_encodes_in_c_when_a_compiler_is_there(tmp_path: Path) -> None:
    done = _select_in_child(tmp_path, GRETE_DIRECT_ENCODER="")
    assert done.stdout.strip() == "c", done.stderr


def test_without_a_compiler_the_producer_falls_back_to_python(tmp_path: Path) -> None:
    done = _select_in_child(tmp_path, CC="/nonexistent/cc", GRETE_DIRECT_ENCODER="")
    assert done.returncode == 0 and done.stdout.strip() == "python", done.stderr
    assert "C batch encoder unavailable" in done.stderr
    forced = _select_in_child(tmp_path, CC="/nonexistent/cc", GRETE_DIRECT_ENCODER="c")
    assert forced.returncode != 0
