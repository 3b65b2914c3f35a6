"""The checker must catch what it claims to catch: histories with planted anomalies (fast, no cluster)."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.jepsen import checker, logfiles
from tests.jepsen.checker import RoundResult, Txn, Write


def ok(value: str, partition: int, offset: int) -> Write:
    writer, seq = checker.parse_write(value) or ("", 0)
    return Write(value, writer, seq, partition, "ok", offset, 1.0)


def test_a_clean_history_has_no_anomalies() -> None:
    result = RoundResult(1, "none")
    writes = [ok("w0g0-0", 0, 0), ok("w0g0-1", 1, 0), ok("w0g0-2", 0, 1), Write("w0g0-3", "w0g0", 3, 1, "fail")]
    reads = {0: [(0, "w0g0-0"), (1, "w0g0-2")], 1: [(0, "w0g0-1"), (1, "w0g0-3")]}  # a failed write may be there
    checker.check_writes(result, writes, reads)
    assert result.anomalies() == {} and (result.acked, result.failed) == (3, 1)


def test_lost_duplicated_reordered_and_overwritten_writes() -> None:
    result = RoundResult(1, "none")
    writes = [ok("w0g0-0", 0, 0), ok("w0g0-1", 0, 1), ok("w0g0-2", 0, 2), ok("w1g0-0", 0, 3)]
    reads = {0: [(0, "w0g0-0"), (1, "w0g0-2"), (2, "w0g0-1"), (3, "w0g0-2")]}
    checker.check_writes(result, writes, reads)
    assert [x.split()[0] for x in result.lost] == ["w1g0-0"]
    assert result.duplicates == ["w0g0-2 x2 (p0@1, p0@3)"]
    assert len(result.reorders) == 1 and "seq 1 at offset 2 after seq 2" in result.reorders[0]
    # acked at offset 1 and 2 and 3, but those offsets hold other values now
    assert len(result.two_values) == 3


def test_reorders_are_per_writer_and_partition() -> None:
    result = RoundResult(1, "none")
    reads = {0: [(0, "w1g0-3"), (1, "w0g0-0"), (2, "w0g1-0")], 1: [(0, "w0g0-5"), (1, "w1g0-1")]}
    checker.check_writes(result, [], reads)
    assert result.reorders == []


def test_aborted_reads_lost_commits_and_half_transactions() -> None:
    result = RoundResult(1, "none")
    txns = [Txn(1, "c", [(0, "t1-c-0"), (1, "t1-c-1")], "committed"),
            Txn(2, "a", [(0, "t2-a-0"), (1, "t2-a-1")], "aborted"),
            Txn(3, "c", [(0, "t3-c-0"), (1, "t3-c-1")], "aborted"),  # the commit failed, then aborted
            Txn(4, "c", [(0, "t4-c-0"), (1, "t4-c-1")], "unknown"),
            Txn(5, "c", [(0, "t5-c-0"), (1, "t5-c-1")], "committed")]
    committed = {0: [(0, "t1-c-0"), (3, "t2-a-0"), (6, "t3-c-0"), (9, "t4-c-0"), (12, "t5-c-0")],
                 1: [(0, "t1-c-1")]}
    uncommitted = {0: [(0, "t1-c-0"), (3, "t2-a-0"), (6, "t3-c-0"), (9, "t4-c-0"), (12, "t5-c-0"), (15, "x")],
                   1: [(0, "t1-c-1"), (1, "t2-a-1")]}
    checker.check_txns(result, txns, committed, uncommitted)
    assert len(result.aborted_reads) == 2  # t2 (meant to abort) and t3 (aborted)
    assert result.lost_committed == ["t5-c-1 (t5 committed; read_uncommitted: absent)"]
    assert [p.split()[0] for p in result.partial_txns] == ["t2", "t3", "t4"]
    assert result.two_values == []
    checker.check_txns(result, [], {0: [(0, "t1-c-0")]}, {0: [(0, "t9-c-0")]})
    assert len(result.two_values) == 1


def test_replicas_disagreeing_below_the_high_watermark() -> None:
    result = RoundResult(1, "none")
    replicas = {1: {0: [(0, "a"), (1, "b"), (2, "c")]}, 2: {0: [(0, "a"), (1, "x"), (2, "y")]},
                3: {0: [(0, "a"), (1, "b")]}}
    checker.check_replicas(result, "t", replicas, {0: 2})
    # offset 1 differs between 1 and 2 and between 2 and 3; offset 2 is above the high watermark
    assert len(result.two_values) == 2 and all("offset 1" in line for line in result.two_values)


def test_unavailable_is_the_longest_stretch_without_an_ack() -> None:
    assert checker.unavailable([1.0, 2.0, 6.5, 7.0], 0.0, 10.0) == 4.5
    assert checker.unavailable([], 0.0, 3.0) == 3.0
    assert checker.unavailable([0.5, 9.5], 1.0, 9.0) == 8.0


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _batch(base: int, values: list[bytes], attributes: int = 0) -> bytes:
    records = b""
    for i, v in enumerate(values):
        body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(v)) + v + _varint(0)
        records += _varint(len(body)) + body
    after_length = struct.pack(">iBIhiqqqhii", 0, 2, 0, attributes, len(values) - 1, 0, 0, -1, -1, -1,
                               len(values)) + records
    return struct.pack(">qi", base, len(after_length)) + after_length


def test_segment_reader(tmp_path: Path) -> None:
    data = _batch(0, [b"a", b"b"]) + _batch(2, [b"\x00\x00\x00\x00"], attributes=0x20) + _batch(3, [b"c"])
    (tmp_path / "00000000000000000000.log").write_bytes(data + _batch(4, [b"torn"])[:30])
    records, skipped = logfiles.read_partition_dir(tmp_path)
    assert records == [(0, "a"), (1, "b"), (3, "c")] and skipped == 0
