"""KRaft snapshot files: grete's bytes against files Kafka 4.3.1's kafka-storage wrote (kept below as
hex), and Kafka's kafka-dump-log reading the files grete writes."""

from __future__ import annotations

import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from grete.protocol.metadata import FeatureLevelRecord, KRaftVersionRecord, VotersRecord
from grete.protocol.metadata_frame import encode_metadata_record
from grete.protocol.records.batch import iter_batches
from grete.storage.checkpoint_file import (
    BOOTSTRAP_CHECKPOINT,
    CheckpointError,
    decode_checkpoint,
    encode_checkpoint,
    parse_snapshot_file_name,
    read_checkpoint,
    snapshot_file_name,
    write_bootstrap_checkpoint,
    write_snapshot,
)
from tools import kafka_dist

# bootstrap.checkpoint of `kafka-storage format -t MkU3OEVBNTcwNTJENDM2Qg` (release 4.3-IV0).
KAFKA_BOOTSTRAP = bytes.fromhex(
    "00000000000000000000004700000000023fceeca8002000000000000001a2234a2a71000001a2234a2a71ffffffffff"
    "ffffffffffffffffff000000012a0000000800000003160000000000000000000000000000000000000001000000f100"
    "000000023656f5fc000000000005000001a2234a2aa0000001a2234a2aa0ffffffffffffffffffffffffffff00000006"
    "3a000000012e010c00116d657461646174612e76657273696f6e001e00005a000002014e010c0021656c696769626c65"
    "2e6c65616465722e7265706c696361732e76657273696f6e00010000340000040128010c000e67726f75702e76657273"
    "696f6e00010000340000060128010c000e73686172652e76657273696f6e0001000038000008012c010c001073747265"
    "616d732e76657273696f6e000100004000000a0134010c00147472616e73616374696f6e2e76657273696f6e00020000"
    "00000000000000070000003f0000000002b4cfa6fe002000000000000001a2234a2aa2000001a2234a2aa2ffffffffff"
    "ffffffffffffffffff000000011a00000008000000040600000000")
FEATURES = [("metadata.version", 30), ("eligible.leader.replicas.version", 1), ("group.version", 1),
            ("share.version", 1), ("streams.version", 1), ("transaction.version", 2)]

# __cluster_metadata-0/00000000000000000000-0000000000.checkpoint of `kafka-storage format --standalone`.
KAFKA_STANDALONE_SNAPSHOT = bytes.fromhex(
    "00000000000000000000009a00000000027b2251c9002000000002000001a2234a3388000001a2234a3388ffffffffff"
    "ffffffffffffffffff000000032a0000000800000003160000000001a2234a337300001e00000208000000050a000000"
    "010000820100000408000000066e0000020000000173b8f1943558438391cf26d9b4fb4e5e020b434f4e54524f4c4c45"
    "520a3132372e302e302e314a9500000000010000000000000000000000030000003f0000000002cdb895960020000000"
    "00000001a2234a339f000001a2234a339fffffffffffffffffffffffffffff000000011a000000080000000406000000"
    "00")
STANDALONE_VOTER = VotersRecord.Voter(
    voter_id=1, voter_directory_id=uuid.UUID("73b8f194-3558-4383-91cf-26d9b4fb4e5e"),
    endpoints=[VotersRecord.Endpoint(name="CONTROLLER", host="127.0.0.1", port=19093)],
    k_raft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))


def feature_values() -> list[bytes]:
    return [encode_metadata_record(FeatureLevelRecord(name=n, feature_level=lvl), 0) for n, lvl in FEATURES]


def clock_of(data: bytes) -> Iterator[int]:
    """The batch timestamps of a Kafka-written file, in order: a clock that replays them."""
    return iter([b.base_timestamp for b in iter_batches(data)])


def test_bootstrap_checkpoint_is_kafkas_byte_for_byte() -> None:
    ticks = clock_of(KAFKA_BOOTSTRAP)
    assert encode_checkpoint(feature_values(), clock=lambda: next(ticks)) == KAFKA_BOOTSTRAP


def test_standalone_snapshot_is_kafkas_byte_for_byte() -> None:
    ticks = clock_of(KAFKA_STANDALONE_SNAPSHOT)
    leading = [KRaftVersionRecord(version=0, k_raft_version=1), VotersRecord(version=0, voters=[STANDALONE_VOTER])]
    data = encode_checkpoint([], last_contained_log_timestamp=0x1A2234A3373, leading_control=leading,
                             clock=lambda: next(ticks))
    assert data == KAFKA_STANDALONE_SNAPSHOT


def test_reads_kafkas_files() -> None:
    boot = decode_checkpoint(KAFKA_BOOTSTRAP)
    assert boot.header.last_contained_log_timestamp == 0 and boot.control == []
    assert boot.values == feature_values()
    assert [r.offset for r in boot.records] == [1, 2, 3, 4, 5, 6]
    snap = decode_checkpoint(KAFKA_STANDALONE_SNAPSHOT)
    assert snap.header.last_contained_log_timestamp == 0x1A2234A3373
    assert snap.control == [KRaftVersionRecord(version=0, k_raft_version=1),
                            VotersRecord(version=0, voters=[STANDALONE_VOTER])]
    assert snap.records == []


def test_batches_split_at_the_size_limit_with_offsets_running_on() -> None:
    values = [bytes([1, 12, 0]) + bytes(100) for _ in range(5)]
    data = encode_checkpoint(values, epoch=7, clock=lambda: 1000, max_batch_size=61 + 2 * 112)  # a record is 112 bytes
    batches = list(iter_batches(data))
    assert [(b.base_offset, b.records_count, b.partition_leader_epoch) for b in batches] == \
        [(0, 1, 7), (1, 2, 7), (3, 2, 7), (5, 1, 7), (6, 1, 7)]
    assert decode_checkpoint(data).values == values


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-1], "trailing byte"),
    (lambda d: d[:30] + bytes([d[30] ^ 1]) + d[31:], "CRC"),
    (lambda d: d[:83], "opens and ends with a control batch"),
    (lambda d: b"", "no record batch"),
])
def test_refuses_a_damaged_file(damage, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckpointError, match=message):
        decode_checkpoint(damage(KAFKA_BOOTSTRAP), "f")


def test_snapshot_names() -> None:
    assert snapshot_file_name(0, 0) == "00000000000000000000-0000000000.checkpoint"
    assert snapshot_file_name(1234, 5) == "00000000000000001234-0000000005.checkpoint"
    assert parse_snapshot_file_name("00000000000000001234-0000000005.checkpoint") == (1234, 5)
    assert parse_snapshot_file_name("00000000000000001234-0000000005.checkpoint.part") is None
    assert parse_snapshot_file_name("1234-5.checkpoint") is None


def test_written_files(tmp_path: Path) -> None:
    boot = write_bootstrap_checkpoint(tmp_path, feature_values(), clock=lambda: 5)
    assert boot.name == BOOTSTRAP_CHECKPOINT and read_checkpoint(boot).values == feature_values()
    snap = write_snapshot(tmp_path / "__cluster_metadata-0", 0, 0, [], last_contained_log_timestamp=9)
    assert snap.name == "00000000000000000000-0000000000.checkpoint"
    assert stat.S_IMODE(snap.stat().st_mode) == 0o400  # frozen read-only, as Kafka leaves it
    assert sorted(p.name for p in snap.parent.iterdir()) == [snap.name]
    assert read_checkpoint(snap).header.last_contained_log_timestamp == 9


def need_kafka() -> None:
    """Skip unless Java and Kafka 4's jars are there (tests/ops/test_storage_tool.py uses it too)."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.fetch("4")
    except Exception as exc:  # no network, no Maven
        pytest.skip(f"Kafka 4 jars unavailable: {exc}")


def test_kafka_dump_log_reads_grete_files(tmp_path: Path) -> None:
    need_kafka()
    boot = write_bootstrap_checkpoint(tmp_path, feature_values())
    leading = [KRaftVersionRecord(version=0, k_raft_version=1), VotersRecord(version=0, voters=[STANDALONE_VOTER])]
    snap = write_snapshot(tmp_path / "__cluster_metadata-0", 0, 0, feature_values()[:1],
                          last_contained_log_timestamp=1, leading_control=leading)
    done = kafka_dist.run_tool("4", "kafka-dump-log", "--cluster-metadata-decoder", "--print-data-log",
                               "--files", f"{boot},{snap}")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Exception" not in out + done.stderr and out.count("isvalid: true") == 6
    assert out.count('SnapshotHeader {"version":0,"lastContainedLogTimestamp":') == 2
    assert out.count('SnapshotFooter {"version":0}') == 2
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in out
    assert '"voterDirectoryId":"c7jxlDVYQ4ORzybZtPtOXg"' in out
    for name, level in FEATURES:
        assert f'"data":{{"name":"{name}","featureLevel":{level}}}' in out
    assert "Snapshot end offset: 0, epoch: 0" in out
