"""The leader-epoch cache's lookups (leader-epoch-checkpoint entries: epoch, start offset)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grete.storage import Log, LogConfig, leader_epoch
from grete.storage.leader_epoch import LeaderEpochCache


def test_epoch_for_offset_is_the_last_epoch_starting_at_or_before_it(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.epoch_for_offset(0) == -1  # no entries
    cache.assign(0, 0)
    cache.assign(3, 1500)
    assert [cache.epoch_for_offset(o) for o in (0, 1499, 1500, 10**9)] == [0, 0, 3, 3]
    cache.truncate_from_start(2000)  # the log's start moved past epoch 0's batches
    assert (cache.epoch_for_offset(1999), cache.epoch_for_offset(2000)) == (-1, 3)


def test_a_partition_reopened_in_its_epoch_rewrites_no_checkpoint(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart opens every partition and assigns its leader epoch again: an empty partition's entry
    (0, 0) is past its log end at load, and then back. The file already says so: it is not rewritten
    (each rewrite is an fsync, per partition and restart)."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(), clean_shutdown=True)
    log.assign_leader_epoch(0, 0)
    log.close()
    writes: list[Path] = []
    monkeypatch.setattr(leader_epoch, "write_checkpoint", lambda path, lines: writes.append(path))
    log = Log.open(directory, LogConfig(), clean_shutdown=True)
    log.assign_leader_epoch(0, 0)  # what opening the partition as its leader does
    log.close()
    assert writes == []
    assert LeaderEpochCache(directory).entries == [(0, 0)]
