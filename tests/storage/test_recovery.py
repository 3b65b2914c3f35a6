"""Crash recovery: torn and corrupt tails, interrupted swaps, corrupt flushed segments."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from grete.protocol.records.batch import RecordBatch, iter_batches
from grete.storage import Log, LogConfig, LogOffline

from ._batches import append, fetched_batches, records

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300)
# Bytes of a batch outside the CRC and not checkable for order: base offset (0-7, may legally jump
# after compaction) and partition leader epoch (12-15). Kafka cannot detect garbage there either.
_UNCHECKED = set(range(0, 8)) | set(range(12, 16))


def build(tmp_path: Path, n: int = 60) -> tuple[Path, list[tuple[int, int]]]:
    log = Log.open(tmp_path / "t-0", CFG, clean_shutdown=True)
    rnd = random.Random(n)
    for _i in range(n):
        append(log, [os.urandom(rnd.randrange(1, 200)) for _ in range(rnd.randrange(1, 4))])
    log.close()
    ranges = []
    for seg in sorted((tmp_path / "t-0").glob("*.log")):
        data = seg.read_bytes()
        ranges.extend((b.base_offset, b.last_offset) for b in iter_batches(data))
    return tmp_path / "t-0", ranges


@pytest.mark.parametrize("seed", range(12))
def test_garbage_at_a_random_position_keeps_exactly_the_valid_prefix(tmp_path: Path, seed: int) -> None:
    d, _ = build(tmp_path)
    rnd = random.Random(seed)
    segs = sorted(d.glob("*.log"))
    victim = segs[rnd.randrange(len(segs))]
    data = bytearray(victim.read_bytes())
    starts = [b.pos for b in iter_batches(data)]
    while True:
        pos = rnd.randrange(len(data))
        batch_start = max(s for s in starts if s <= pos)
        if pos - batch_start not in _UNCHECKED:
            break
    length = rnd.randrange(1, 16)
    for i in range(pos, min(pos + length, len(data))):
        data[i] ^= rnd.randrange(1, 256)  # always a different byte
    victim.write_bytes(data)
    base = int(victim.name[:20])
    expected_end = max([b.next_offset for b in iter_batches(data) if b.pos + b.size <= batch_start] or [base])
    # Recovery point 0: nothing was known flushed, everything is rescanned.
    log = Log.open(d, CFG, clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == expected_end
    assert [o for o, _, _ in records(log)] == list(range(expected_end))
    assert not any(int(p.name[:20]) > base for p in d.glob("*.log"))
    # New appends continue right after the valid prefix and survive another recovery.
    append(log, [b"after"])
    log.close()
    again = Log.open(d, CFG, clean_shutdown=False)
    assert again.log_end_offset == expected_end + 1


def test_zero_filled_tail_after_crash(tmp_path: Path) -> None:
    d, ranges = build(tmp_path, 10)
    last = sorted(d.glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(b"\0" * 5000)  # e.g. preallocated blocks after a power cut
    log = Log.open(d, CFG, clean_shutdown=False)
    assert log.log_end_offset == ranges[-1][1] + 1


def test_recovery_rebuilds_indexes_and_state_from_the_recovery_point(tmp_path: Path) -> None:
    d, ranges = build(tmp_path)
    segs = sorted(d.glob("*.log"))
    for p in d.glob("*.index"):
        if p.name[:20] >= segs[-2].name[:20]:
            p.write_bytes(b"\0" * 80)  # stale garbage in unflushed indexes
    rp = int(segs[-2].name[:20])
    log = Log.open(d, CFG, clean_shutdown=False, recovery_point=rp)
    assert log.log_end_offset == ranges[-1][1] + 1
    for offset in range(log.log_end_offset):
        assert fetched_batches(log.read(offset, 1).read_bytes())[0].last_offset >= offset


def test_corrupt_flushed_segment_takes_the_partition_offline(tmp_path: Path) -> None:
    d, _ = build(tmp_path)
    segs = sorted(d.glob("*.log"))
    victim = segs[1]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(data)
    (d / (victim.name[:20] + ".index")).unlink()  # forces a rescan of the flushed segment
    with pytest.raises(LogOffline) as exc:
        Log.open(d, CFG, clean_shutdown=True)
    assert exc.value.path == victim
    assert 0 <= exc.value.position <= 200
    assert victim.read_bytes() == bytes(data)  # never "repaired" silently


def test_interrupted_swap_is_completed(tmp_path: Path) -> None:
    d, ranges = build(tmp_path)
    segs = sorted(d.glob("*.log"))
    # Pretend the cleaner merged segments 0 and 1 into one file and crashed after renaming it .swap.
    merged = segs[0].read_bytes() + segs[1].read_bytes()
    (d / (segs[0].name + ".swap")).write_bytes(merged)
    (d / (segs[2].name[:20] + ".index.cleaned")).write_bytes(b"junk")
    log = Log.open(d, CFG, clean_shutdown=False)
    names = os.listdir(d)
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    assert segs[1].name not in names
    assert [o for o, _, _ in records(log)] == list(range(ranges[-1][1] + 1))


def test_deleted_and_tmp_files_are_removed(tmp_path: Path) -> None:
    d, _ = build(tmp_path, 5)
    (d / "00000000000000000000.log.deleted").write_bytes(b"x")
    (d / "leader-epoch-checkpoint.tmp").write_bytes(b"x")
    Log.open(d, CFG, clean_shutdown=True)
    assert not [n for n in os.listdir(d) if n.endswith((".deleted", ".tmp"))]


def test_slice_survives_segment_deletion(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CFG.replace(file_delete_delay_ms=0), clean_shutdown=True)
    for _ in range(80):
        append(log, [b"q" * 100])
    res = log.read(0, 10_000)
    expected = res.read_bytes()
    log.delete_records_before(60)
    log.run_pending_deletes(10**15)
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert res.read_bytes() == expected  # the fd held by the slice is still valid
    assert RecordBatch(expected).crc_ok()


def test_garbage_in_derived_files_is_rebuilt(tmp_path: Path) -> None:
    """Indexes, txn index, snapshots and the epoch checkpoint are derived data: garbage in them
    must never lose or misplace records (clean shutdown, so nothing is rescanned by default)."""
    from ._batches import marker

    d = tmp_path / "t-0"
    log = Log.open(d, CFG, clean_shutdown=True)
    for i in range(30):
        append(log, [f"{i}".encode() * 40], leader_epoch=i // 10)
    append(log, [b"tx"], producer_id=9, epoch=0, seq=0, transactional=True)
    marker(log, 9, 0, commit=False)
    for i in range(30):
        append(log, [f"{i}".encode() * 40], leader_epoch=3, producer_id=4, epoch=0, seq=i)
    expected = records(log)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    epochs = list(log.epochs.entries)
    log.close()
    rnd = random.Random(3)
    for p in d.iterdir():
        if p.suffix in (".index", ".timeindex", ".txnindex", ".snapshot") or p.name == "leader-epoch-checkpoint":
            p.write_bytes(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 60) * 2 + 1)))
    again = Log.open(d, CFG, clean_shutdown=True)
    assert records(again) == expected
    assert again.aborted_transactions(0, again.log_end_offset) == aborted
    assert again.epochs.entries == epochs
    assert again.last_sequence(4) == 29
    for offset in range(again.log_end_offset):
        assert fetched_batches(again.read(offset, 1).read_bytes())[0].last_offset >= offset
