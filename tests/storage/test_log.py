"""Append, read, indexes, rolling and reopening of a partition log on real files."""

from __future__ import annotations

import os
import struct
import uuid
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.storage import Log, LogConfig
from grete.storage.files import uuid_to_kafka

from ._batches import append, fetched_batches, make_batch, records


def open_log(tmp_path: Path, clean: bool = True, **cfg: object) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig().replace(**cfg), clean_shutdown=clean)


def test_append_assigns_offsets_and_writes_wire_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    b1 = make_batch([b"a", b"b", b"c"])
    r1 = log.append(b1, leader_epoch=7, now_ms=5)
    r2 = append(log, [b"d"])
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.last_offset) == (0, 2, 3, 3)
    assert r1.log_append_time == -1 and not r1.duplicate
    assert log.log_end_offset == 4
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    # The file is exactly the patched client batch followed by the next: no framing of our own.
    assert data[:b1.size] == bytes(b1.buf)
    first = RecordBatch(data)
    assert first.base_offset == 0 and first.partition_leader_epoch == 7 and first.crc_ok()
    assert records(log) == [(0, None, b"a"), (1, None, b"b"), (2, None, b"c"), (3, None, b"d")]


def test_read_returns_whole_batches_from_the_containing_one(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _i in range(10):
        append(log, [b"x" * 100, b"y" * 100])  # offsets 2i, 2i+1
    res = log.read(5, 10_000)
    batches = fetched_batches(res.read_bytes())
    assert batches[0].base_offset == 4 and res.first_offset == 4
    assert batches[-1].last_offset == 19
    assert res.chunks is res.slices and res.size == sum(s.size for s in res.slices)


def test_read_max_bytes_min_one_and_upper_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = [append(log, [b"v" * 300]) for _ in range(6)]
    one = make_batch([b"v" * 300]).size
    assert len(sizes) == 6
    res = log.read(0, one * 2 + 10)
    assert [b.base_offset for b in fetched_batches(res.read_bytes())] == [0, 1]
    res = log.read(2, 5)  # smaller than one batch: min_one still returns it
    assert [b.base_offset for b in fetched_batches(res.read_bytes())] == [2]
    assert log.read(2, 5, min_one=False).size == 0
    res = log.read(1, 1 << 20, upper_bound=4)
    assert [b.base_offset for b in fetched_batches(res.read_bytes())] == [1, 2, 3]
    assert log.read(4, 1 << 20, upper_bound=4).size == 0
    assert log.read(6, 1 << 20).size == 0  # at the log end: empty, not an error
    for bad in (-1, 7):
        with pytest.raises(KafkaError) as exc:
            log.read(bad, 100)
        assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_roll_on_segment_bytes_and_read_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=200)
    for i in range(50):
        append(log, [f"value-{i}".encode() * 10])
    names = sorted(os.listdir(tmp_path / "t-0"))
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) >= 4 and all(len(n) == 24 for n in logs)
    assert len(log.segments) == len(logs)
    for seg in log.segments:
        assert seg.size <= 2000
    # Snapshots are taken at each roll, named by the new segment's base offset.
    snaps = {n.split(".")[0] for n in names if n.endswith(".snapshot")}
    assert snaps >= {n.split(".")[0] for n in logs[1:]}
    # Inactive indexes are trimmed to their entries.
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
    assert [o for o, _, _ in records(log)] == list(range(50))
    for offset in range(50):
        first = fetched_batches(log.read(offset, 1).read_bytes())[0]
        assert first.base_offset == offset


def test_offset_index_entries_point_at_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=500)
    for _ in range(40):
        append(log, [b"z" * 90, b"z" * 90])
    seg = log.active
    data = seg.log_path.read_bytes()
    assert seg.offset_index.entries > 3
    for n in range(seg.offset_index.entries):
        rel, pos = struct.unpack_from(">ii", seg.offset_index._map, n * 8)  # type: ignore[arg-type]
        batch = RecordBatch(data, pos)
        assert batch.last_offset == rel  # Kafka: last offset of the append -> its start position


def test_reopen_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=100)
    for i in range(30):
        append(log, [f"{i}".encode() * 20], ts=1000 + i)
    before = records(log)
    idx_sizes = [seg.offset_index.entries for seg in log.segments]
    log.close()
    again = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=100)
    assert again.log_end_offset == 30 and records(again) == before
    assert [seg.offset_index.entries for seg in again.segments] == idx_sizes
    assert again.offset_of_max_timestamp() == (29, 1029)
    assert append(again, [b"more"], ts=5000).base_offset == 30
    assert again.offset_of_max_timestamp() == (30, 5000)


def test_unclean_reopen_truncates_a_torn_tail(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(5):
        append(log, [f"{i}".encode() * 50])
    path = log.active.log_path
    log.flush()
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(whole[: len(whole) // 5 - 7])  # half-written next batch
    again = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=False)
    assert again.log_end_offset == 5
    assert path.stat().st_size == len(whole)
    assert append(again, [b"next"]).base_offset == 5


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=300)
    for i in range(60):
        append(log, [f"{i}".encode() * 40])
    expected = [(s.offset_index.entries, s.time_index.entries) for s in log.segments[:-1]]
    log.close()
    segs = sorted((tmp_path / "t-0").glob("*.index"))
    segs[0].unlink()
    segs[1].write_bytes(b"\xff" * 17)  # not a multiple of 8, out of order
    again = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=300)
    got = [(s.offset_index.entries, s.time_index.entries) for s in again.segments[:-1]]
    assert got[:2] == expected[:2]
    for offset in range(60):
        assert fetched_batches(again.read(offset, 1).read_bytes())[0].base_offset == offset


def test_log_append_time_is_stamped(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    res = append(log, [b"a", b"b"], now_ms=123_456)
    assert res.log_append_time == 123_456 and res.max_timestamp == 123_456
    batch = next(log.batches())
    assert batch.timestamp_type == 1 and batch.max_timestamp == 123_456 and batch.crc_ok()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=700, index_interval_bytes=100)
    for i in range(20):
        append(log, [b"a" * 30, b"b" * 30, b"c" * 30], ts=10_000 + i * 100, ts_step=10)
    # batch i holds offsets 3i..3i+2 with timestamps 10000+100i + {0,10,20}
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_505) == (3 * 5 + 1, 10_510)
    assert log.offset_for_timestamp(11_920) == (59, 11_920)
    assert log.offset_for_timestamp(11_921) is None
    assert log.offset_of_max_timestamp() == (59, 11_920)


def test_leader_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, [b"a"], leader_epoch=1)
    append(log, [b"b"], leader_epoch=1)
    append(log, [b"c"], leader_epoch=3)
    log.assign_leader_epoch(5, 3)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(5) == (5, 3)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(9) == (-1, -1)
    text = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text()
    assert text == "0\n3\n1 0\n3 2\n5 3\n"
    log.close()
    again = open_log(tmp_path)
    assert again.end_offset_for_epoch(1) == (1, 2)


def test_partition_metadata_uses_kafka_uuid_text(tmp_path: Path) -> None:
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    Log.open(tmp_path / "t-3", LogConfig(), topic_id=tid, clean_shutdown=True)
    text = (tmp_path / "t-3" / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {uuid_to_kafka(tid)}"
    assert len(uuid_to_kafka(tid)) == 22 and "=" not in uuid_to_kafka(tid)
    assert Log.open(tmp_path / "t-3", LogConfig(), clean_shutdown=True).topic_id == tid


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    for i in range(20):
        append(log, [f"{i}".encode() * 30], leader_epoch=i // 5)
    log.truncate_to(12)
    assert log.log_end_offset == 12
    assert [o for o, _, _ in records(log)] == list(range(12))
    assert log.end_offset_for_epoch(2) == (2, 12)
    assert append(log, [b"new"], leader_epoch=5).base_offset == 12
    log.close()
    assert open_log(tmp_path, segment_bytes=600).log_end_offset == 13


def test_record_set_larger_than_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    with pytest.raises(KafkaError) as exc:
        append(log, [b"x" * 300])
    assert exc.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


def test_roll_on_segment_ms_and_on_full_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    append(log, [b"a"], ts=10_000, now_ms=10_000)
    append(log, [b"b"], ts=10_500, now_ms=10_900)
    assert len(log.segments) == 1
    append(log, [b"c"], ts=11_100, now_ms=11_001)  # first batch of the segment is > segment.ms old
    assert [s.base_offset for s in log.segments] == [0, 2]

    small = Log.open(tmp_path / "s-0", LogConfig(segment_index_bytes=32, index_interval_bytes=1),
                     clean_shutdown=True)
    for _ in range(30):
        append(small, [b"x" * 20])
    assert len(small.segments) > 3
    for seg in small.segments[:-1]:
        assert seg.offset_index.entries <= 4 and seg.time_index.entries <= 2
    assert [o for o, _, _ in records(small)] == list(range(30))


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    for _ in range(4):
        append(log, [b"x"])
    assert log.recovery_point == 0
    append(log, [b"x"])
    assert log.recovery_point == 5
