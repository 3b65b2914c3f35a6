"""An idle follower's fetch on the leader (the same offset as its last one, the log end): as in
Kafka's Partition.updateFollowerFetchState, it keeps the follower caught up but does not recompute
the high watermark, which only a follower's moved log end (or an append, an ISR change, a new
leadership) can move. A fetch that does move the follower's log end still moves it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grete.broker.replica.partition import Partition
from tests.broker._calls import counted
from tests.broker.test_partition_replication import batch, leader


def _leader_with_followers_at(tmp_path: Path, offset_2: int, offset_3: int) -> Partition:
    """A leader of 3 records whose followers 2 and 3 have fetched from these offsets."""
    p = leader(tmp_path, isr=[1, 2, 3])
    p.append(batch(3), 1000)
    p.update_follower(2, offset_2, 1001)
    p.update_follower(3, offset_3, 1001)
    return p


def test_an_idle_follower_fetch_does_not_recompute_the_high_watermark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _leader_with_followers_at(tmp_path, 3, 3)
    assert p.high_watermark == 3
    calls = counted(monkeypatch, Partition, "_advance_high_watermark")
    for now_ms in range(1002, 1012):
        p.update_follower(2, 3, now_ms)
    assert calls == [0] and p.high_watermark == 3 and p.isr == [1, 2, 3]


def test_a_follower_fetch_that_moves_its_log_end_still_moves_the_high_watermark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _leader_with_followers_at(tmp_path, 3, 1)
    assert p.high_watermark == 1
    calls = counted(monkeypatch, Partition, "_advance_high_watermark")
    p.update_follower(3, 1, 1002)  # idle: nothing moves
    assert p.high_watermark == 1 and calls == [0]
    p.update_follower(3, 3, 1003)
    assert p.high_watermark == 3 and calls == [1]
