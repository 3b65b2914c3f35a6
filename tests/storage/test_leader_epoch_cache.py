"""The leader-epoch cache's lookups (leader-epoch-checkpoint entries: epoch, start offset)."""

from __future__ import annotations

from pathlib import Path

from grete.storage.leader_epoch import LeaderEpochCache


def test_epoch_for_offset_is_the_last_epoch_starting_at_or_before_it(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.epoch_for_offset(0) == -1  # no entries
    cache.assign(0, 0)
    cache.assign(3, 1500)
    assert [cache.epoch_for_offset(o) for o in (0, 1499, 1500, 10**9)] == [0, 0, 3, 3]
    cache.truncate_from_start(2000)  # the log's start moved past epoch 0's batches
    assert (cache.epoch_for_offset(1999), cache.epoch_for_offset(2000)) == (-1, 3)
