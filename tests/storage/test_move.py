"""Moving a partition between log dirs (AlterReplicaLogDirs): a -future log, copied, then swapped."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from grete.storage import LogConfig, LogManager
from grete.storage.log import Log

from ._batches import append, fetched_batches, make_batch, marker

CONFIG = LogConfig(segment_bytes=1500)


def start(tmp_path: Path) -> LogManager:
    mgr = LogManager([tmp_path / "d0", tmp_path / "d1"], CONFIG)
    mgr.startup()
    return mgr


def log_bytes(lg: Log) -> bytes:
    out, start = b"", lg.log_start_offset
    while start < lg.log_end_offset:
        chunk = lg.read(start, 1 << 30).read_bytes()
        out += chunk
        start = fetched_batches(chunk)[-1].last_offset + 1
    return out


def test_future_log_copies_then_replaces_the_current_one(tmp_path: Path) -> None:
    mgr = start(tmp_path)
    tid = uuid.uuid4()
    cur = mgr.create_log("t", 0, topic_id=tid)
    assert cur.log_dir == tmp_path / "d0"
    for i in range(20):
        append(cur, [f"v{i}".encode() * 20], leader_epoch=i // 7)
    cur.append(make_batch([b"t1"], producer_id=5, epoch=0, seq=0, transactional=True), leader_epoch=2, now_ms=1)
    marker(cur, 5, 0, commit=False)
    cur.assign_leader_epoch(9, cur.log_end_offset)  # an epoch no batch carries yet

    future = mgr.create_future_log("t", 0, tmp_path / "d1")
    assert future.dir.name.startswith("t-0.") and future.dir.name.endswith("-future")
    assert mgr.create_log("t", 1).log_dir == tmp_path / "d0"  # the future log counts for d1: a tie
    steps = 0
    while not mgr.copy_to_future("t", 0, max_bytes=400):
        steps += 1
    assert steps > 1  # several chunks
    append(cur, [b"late"], leader_epoch=9)  # the current log keeps taking writes during the copy
    assert future.log_end_offset < cur.log_end_offset
    assert mgr.copy_to_future("t", 0)
    expected, hw = log_bytes(cur), cur.high_watermark
    old_dir = cur.dir
    moved = mgr.replace_current_with_future("t", 0)
    assert moved.dir == tmp_path / "d1" / "t-0" and not old_dir.exists()
    assert mgr.get_log("t", 0) is moved and mgr.get_future_log("t", 0) is None
    assert log_bytes(moved) == expected and moved.high_watermark == hw and moved.topic_id == tid
    assert moved.epochs.entries == [(0, 0), (1, 7), (2, 14), (9, 22)]
    assert moved.aborted_transactions(0, 100) == [(5, 20)]
    append(moved, [b"after"], leader_epoch=9)
    mgr.shutdown()

    again = start(tmp_path)
    reloaded = again.get_log("t", 0)
    assert reloaded is not None and reloaded.log_dir == tmp_path / "d1"
    assert reloaded.log_end_offset == moved.log_end_offset and not again.future_logs
    again.shutdown()


def test_unfinished_move_survives_a_restart_and_an_interrupted_swap_completes(tmp_path: Path) -> None:
    mgr = start(tmp_path)
    cur = mgr.create_log("t", 0)
    for i in range(5):
        append(cur, [f"v{i}".encode()])
    mgr.create_future_log("t", 0, tmp_path / "d1")
    mgr.copy_to_future("t", 0)
    mgr.shutdown()

    again = start(tmp_path)
    future = again.get_future_log("t", 0)
    assert future is not None and future.log_end_offset == 5 and again.get_log("t", 0) is not None
    # A crash between the swap's two renames: the current log is gone, the future one remains.
    again.get_log("t", 0).delete()  # type: ignore[union-attr]
    again.shutdown()
    third = start(tmp_path)
    promoted = third.get_log("t", 0)
    assert promoted is not None and promoted.dir == tmp_path / "d1" / "t-0"
    assert promoted.log_end_offset == 5 and not third.future_logs
    third.shutdown()


def test_future_log_refuses_the_same_dir_and_unknown_dirs(tmp_path: Path) -> None:
    mgr = start(tmp_path)
    mgr.create_log("t", 0)
    with pytest.raises(ValueError):
        mgr.create_future_log("t", 0, tmp_path / "d0")
    with pytest.raises(Exception, match="LOG_DIR_NOT_FOUND"):
        mgr.create_future_log("t", 0, tmp_path / "elsewhere")
    future = mgr.create_future_log("t", 0, tmp_path / "d1")
    append(mgr.get_log("t", 0), [b"x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="future log of t-0 is at 0"):  # not caught up
        mgr.replace_current_with_future("t", 0)
    assert mgr.get_future_log("t", 0) is future and future.dir.exists()
    mgr.delete_log("t", 0)
    assert not list((tmp_path / "d1").glob("t-0*"))
    mgr.shutdown()
