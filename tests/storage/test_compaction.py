"""Compaction: last value per key, tombstones, transactions, offsets unchanged, crash-safe swap."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grete.protocol.records.record import absolute_records
from grete.storage import Log, LogConfig, LogManager
from grete.storage.cleaner import clean_log

from ._batches import append, fetched_batches, marker, records

DAY = 86_400_000
CFG = LogConfig(cleanup_policy="compact", segment_bytes=1200, index_interval_bytes=200,
                min_cleanable_dirty_ratio=0.01, delete_retention_ms=DAY)


def open_log(tmp_path: Path, cfg: LogConfig = CFG) -> Log:
    return Log.open(tmp_path / "c-0", cfg, clean_shutdown=True)


def write(log: Log, ops: list[tuple[bytes, bytes | None]], ts: int) -> dict[bytes, tuple[int, bytes | None]]:
    """Append (key, value) pairs a few per batch; return the model: key -> (last offset, value)."""
    model: dict[bytes, tuple[int, bytes | None]] = {}
    i = 0
    while i < len(ops):
        chunk = ops[i:i + 3]
        res = append(log, [v for _, v in chunk], [k for k, _ in chunk], ts=ts)
        for j, (k, v) in enumerate(chunk):
            model[k] = (res.base_offset + j, v)
        i += 3
    return model


def compact(log: Log, now_ms: int, first_dirty: int = 0) -> int:
    done = clean_log(log, first_dirty, now_ms)
    assert done is not None
    return done[0]


def cleanable_end(log: Log) -> int:
    return log.active.base_offset


def check_latest_values(log: Log, model: dict[bytes, tuple[int, bytes | None]], tombstones_gone: bool) -> None:
    end = cleanable_end(log)
    seen: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for batch in log.batches():
        for r in absolute_records(batch):
            assert r.key is not None
            seen.setdefault(r.key, []).append((r.offset, r.value))
    for key, (offset, value) in model.items():
        got = seen.get(key, [])
        if value is None and tombstones_gone and offset < end:
            assert got == [], key
            continue
        assert (offset, value) in got, key  # the latest record of every key survives, same offset
        if offset < end:
            assert got == [(offset, value)], key  # and, in the cleaned part, only it


def test_latest_value_per_key_survives_and_offsets_do_not_change(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    rnd = random.Random(1)
    ops = [(f"k{rnd.randrange(20)}".encode(), os.urandom(8)) for _ in range(300)]
    model = write(log, ops, ts=1_000)
    before_offsets = [o for o, _, _ in records(log)]
    size_before = log.size_bytes
    compact(log, now_ms=2_000)
    check_latest_values(log, model, tombstones_gone=False)
    after = [o for o, _, _ in records(log)]
    assert after == sorted(after) and set(after) <= set(before_offsets)
    assert log.size_bytes < size_before / 3
    assert log.log_end_offset == 300
    # Every offset is still readable: reads land on the batch holding the next surviving record.
    for offset in range(0, 300, 7):
        batches = fetched_batches(log.read(offset, 1).read_bytes())
        assert batches[0].last_offset >= offset
    # No leftovers beyond the pending .deleted files, and a reopen sees the same data.
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    log.close()
    again = open_log(tmp_path)
    assert [o for o, _, _ in records(again)] == after


def test_tombstones_vanish_only_after_delete_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    model = write(log, [(f"k{i}".encode(), b"v") for i in range(30)], ts=1_000)
    model.update(write(log, [(f"k{i}".encode(), None) for i in range(0, 30, 2)], ts=2_000))
    model.update(write(log, [(b"filler", b"x")] * 30, ts=3_000))
    dirty = compact(log, now_ms=4_000)
    check_latest_values(log, model, tombstones_gone=False)  # first pass: tombstones stay
    assert any(v is None for _, _, v in records(log))
    newest = max(seg.max_timestamp for seg in log.segments[:-1])
    assert clean_log(log, dirty, newest + DAY // 2, force=True) is not None
    assert any(v is None for _, _, v in records(log))  # still within delete.retention.ms
    assert clean_log(log, dirty, newest + DAY + 1, force=True) is not None
    check_latest_values(log, model, tombstones_gone=True)
    assert not any(v is None for o, _, v in records(log) if o < cleanable_end(log))


def test_aborted_data_is_removed_and_producer_state_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, [b"a1", b"a2"], [b"a", b"a"], producer_id=5, epoch=0, seq=0, transactional=True)
    marker(log, 5, 0, commit=False)
    append(log, [b"c1"], [b"c"], producer_id=6, epoch=0, seq=0, transactional=True)
    marker(log, 6, 0, commit=True)
    append(log, [b"i1"], [b"i"], producer_id=7, epoch=0, seq=0)
    append(log, [b"i2"], [b"i"], producer_id=7, epoch=0, seq=1)
    for _i in range(40):
        append(log, [b"f"], [b"filler"])
    compact(log, now_ms=10_000)
    values = [v for _, _, v in records(log)]
    assert b"a1" not in values and b"a2" not in values  # aborted
    assert b"c1" in values and b"i2" in values and b"i1" not in values
    assert log.aborted_transactions(0, log.log_end_offset) == [(5, 0)]
    # The producers' state is unchanged: sequences continue, duplicates are still detected.
    assert append(log, [b"i3"], [b"i"], producer_id=7, epoch=0, seq=2).base_offset == log.log_end_offset - 1
    log.close()
    again = open_log(tmp_path)
    assert again.last_sequence(7) == 2


def test_emptied_last_batch_of_a_producer_is_kept_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, [b"old"], [b"k"], producer_id=9, epoch=3, seq=0)
    for i in range(40):
        append(log, [f"new{i}".encode()], [b"k"])
    compact(log, now_ms=10_000)
    first = next(log.batches())
    assert first.producer_id == 9 and first.records_count == 0 and first.base_sequence == 0
    assert first.base_offset == 0 and first.last_offset_delta == 0 and first.crc_ok()


def test_manager_runs_the_cleaner_thread(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path / "d"], CFG)
    mgr.startup()
    lg = mgr.create_log("c", 0)
    for i in range(200):
        append(lg, [os.urandom(10)], [f"k{i % 5}".encode()])
    size = lg.size_bytes
    mgr.maintenance()
    cleaner = mgr.cleaner()
    deadline = time.time() + 20
    while cleaner.passes == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert cleaner.passes >= 1 and cleaner.last_error is None
    assert lg.size_bytes < size / 2
    assert mgr.cleaner_offsets[("c", 0)] > 0
    mgr.shutdown()
    text = (tmp_path / "d" / "cleaner-offset-checkpoint").read_text().splitlines()
    assert text[:2] == ["0", "1"] and text[2].startswith("c 0 ")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.one_of(st.none(), st.binary(min_size=1, max_size=12))),
                min_size=1, max_size=120))
def test_compaction_property(tmp_path_factory, ops) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("prop")
    log = open_log(tmp)
    model = write(log, [(f"key{k}".encode(), v) for k, v in ops], ts=1_000)
    write(log, [(b"filler", b"x" * 40)] * 30, ts=1_000)  # push everything out of the active segment
    model_end = log.log_end_offset
    before = {(o, k, v) for o, k, v in records(log)}
    if clean_log(log, 0, 2_000) is None:
        return
    after = records(log)
    assert set(after) <= before  # nothing invented, offsets unchanged
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    check_latest_values(log, model, tombstones_gone=False)
    assert log.log_end_offset == model_end


def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    lagged = CFG.replace(min_compaction_lag_ms=DAY)
    log = open_log(tmp_path, lagged)
    write(log, [(b"k", b"v")] * 90, ts=1_000)
    assert clean_log(log, 0, now_ms=1_000 + DAY - 1) is None  # every segment is younger than the lag
    assert clean_log(log, 0, now_ms=1_000 + DAY + 10) is not None

    lazy = CFG.replace(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000)
    log2 = Log.open(tmp_path / "lazy-0", lazy, clean_shutdown=True)
    write(log2, [(b"k", b"v")] * 90, ts=1_000)
    assert clean_log(log2, 0, now_ms=30_000) is None  # ratio never reached, deadline not yet
    assert clean_log(log2, 0, now_ms=100_000) is not None  # max.compaction.lag.ms forces it


def test_cleaner_on_its_thread_without_a_process(tmp_path: Path) -> None:
    from grete.storage.cleaner import LogCleaner

    mgr = LogManager([tmp_path / "d"], CFG)
    mgr.startup()
    lg = mgr.create_log("c", 0)
    for i in range(120):
        append(lg, [os.urandom(10)], [f"k{i % 3}".encode()])
    stats = LogCleaner(mgr, use_process=False).clean_now(("c", 0), int(time.time() * 1000))
    assert stats is not None and stats.records_removed > 0 and stats.groups
    assert mgr.cleaner_offsets[("c", 0)] == lg.active.base_offset


def test_a_pass_is_dropped_when_the_log_changes_underneath(tmp_path: Path) -> None:
    from grete.storage.cleaner import CompactionAborted, plan_cleaning, swap_all, write_cleaned

    log = open_log(tmp_path)
    write(log, [(f"k{i % 4}".encode(), b"v" * 20) for i in range(150)], ts=1_000)
    planned = plan_cleaning(log, 0, 2_000)
    assert planned is not None
    spec, olds = planned
    groups, stats = write_cleaned(spec)
    assert [n for n in os.listdir(log.dir) if n.endswith(".cleaned")]
    log.delete_records_before(log.segments[1].base_offset)  # retention/DeleteRecords wins the race
    before = records(log)
    with pytest.raises(CompactionAborted):
        swap_all(log, spec, olds, groups, stats)
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    assert records(log) == before
