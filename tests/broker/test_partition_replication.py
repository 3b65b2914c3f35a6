"""A partition's leader-side replication rules, without a cluster: the high watermark follows the
ISR's log end offsets (and not at all below min.insync.replicas), acks=all waits on it, ISR changes
are proposed and settled, a follower appends the leader's batches as they are."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from grete.broker.replica.partition import Partition
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log

TOPIC_ID = uuid.uuid4()


def leader(tmp_path: Path, *, isr: list[int], replicas: tuple[int, ...] = (1, 2, 3), min_isr: int = 1,
           proposals: list[list[int]] | None = None) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=min_isr), topic_id=TOPIC_ID, clean_shutdown=True)
    partition = Partition("t", 0, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=1)
    if proposals is not None:
        partition.alter_isr = lambda _p, new: proposals.append(new)
    partition.make_leader(0, 0, 1, replicas, isr, now_ms=1000)
    return partition


def batch(n: int = 1) -> RecordBatch:
    return RecordBatch(build_batch([Record(i, 0, None, b"v") for i in range(n)]))


def test_high_watermark_follows_the_slowest_isr_member(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=[1, 2, 3])
    p.append(batch(3), 1000)
    assert p.log_end_offset == 3 and p.high_watermark == 0
    p.update_follower(2, 3, 1001)
    assert p.high_watermark == 0  # 3 has not fetched yet
    p.update_follower(3, 2, 1002)
    assert p.high_watermark == 2
    p.update_follower(3, 1, 1003)  # never goes back
    assert p.high_watermark == 2


def test_acks_all_waits_for_the_isr(tmp_path: Path) -> None:
    asyncio.run(_acks_all_waits(tmp_path))


async def _acks_all_waits(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=[1, 2])
    result = p.append(batch(), 1000)
    waiting = asyncio.ensure_future(p.wait_for_replication(result.last_offset + 1, 5000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    p.update_follower(2, 1, 1001)
    assert await waiting == ErrorCode.NONE


def test_acks_all_times_out_and_fails_on_leadership_loss(tmp_path: Path) -> None:
    asyncio.run(_acks_all_fails(tmp_path))


async def _acks_all_fails(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=[1, 2])
    p.append(batch(), 1000)
    assert await p.wait_for_replication(1, 50) == ErrorCode.REQUEST_TIMED_OUT
    waiting = asyncio.ensure_future(p.wait_for_replication(1, 5000))
    await asyncio.sleep(0.01)
    p.make_follower(1, 1, 2)
    assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_min_insync_replicas(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=[1], replicas=(1, 2), min_isr=2)
    with pytest.raises(KafkaError) as refused:
        p.check_enough_replicas()
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    p.append(batch(), 1000)  # acks=1 still writes
    p.update_follower(2, 1, 1001)  # a follower outside the ISR does not move the HW...
    assert p.high_watermark == 0  # ...and with the ISR below min.insync.replicas nothing does


def test_isr_expands_when_caught_up_and_shrinks_when_stalled(tmp_path: Path) -> None:
    proposals: list[list[int]] = []
    p = leader(tmp_path, isr=[1, 2], proposals=proposals)
    p.append(batch(2), 1000)
    p.update_follower(2, 2, 1000)
    assert p.high_watermark == 2
    p.update_follower(3, 1, 1000)
    assert proposals == []  # below the high watermark: not in sync yet
    p.update_follower(3, 2, 1000)
    assert proposals == [[1, 2, 3]]
    changes: list[tuple[int, int]] = []
    p.isr_changed = lambda before, after: changes.append((before, after))
    p.isr_change_answered(ErrorCode.NONE, 0, [1, 2, 3], 1)
    assert p.isr == [1, 2, 3] and p.partition_epoch == 1
    assert changes == [(2, 3)]  # counted as an expansion (IsrExpandsPerSec)
    p.append(batch(), 2000)
    p.update_follower(2, 3, 2000)
    p.maybe_shrink_isr(40_000, 30_000)  # 3 last caught up at 1000
    assert proposals[-1] == [1, 2]
    p.isr_change_answered(ErrorCode.FENCED_LEADER_EPOCH, 0, [], 0)
    assert p.isr == [1, 2, 3]  # stays pending until the next LeaderAndIsr


def test_a_follower_of_a_broker_away_joins_the_isr_when_the_broker_is_back(tmp_path: Path) -> None:
    """Kafka 3.9's ZooKeeper-mode eligibility: only live brokers are proposed. A caught-up follower
    whose broker comes back is proposed then, without another fetch (a pushed follower sends none
    while the leader has nothing new); a join during a change in flight waits for its answer."""
    proposals: list[list[int]] = []
    alive = {1, 2}
    p = leader(tmp_path, isr=[1, 2], proposals=proposals)
    p.replica_alive = alive.__contains__
    p.append(batch(2), 1000)
    p.update_follower(2, 2, 1000)
    p.update_follower(3, 2, 1000)
    assert proposals == []  # caught up, but its broker is not live
    p.recheck_isr_expansion()
    assert proposals == []
    alive.add(3)
    p.update_follower(2, 2, 1100)
    p.maybe_shrink_isr(40_000, 30_000)  # 2 is at the log end: nothing to shrink, nothing in flight
    p.recheck_isr_expansion()
    assert proposals == [[1, 2, 3]]
    p.isr_change_answered(ErrorCode.INELIGIBLE_REPLICA, 0, [], 0)
    p.recheck_isr_expansion()
    assert proposals[-1] == [1, 2, 3] and len(proposals) == 2
    p.recheck_isr_expansion()  # in flight: once it is answered
    assert len(proposals) == 2
    p.isr_change_answered(ErrorCode.OPERATION_NOT_ATTEMPTED, 0, [], 0)
    assert len(proposals) == 3 and proposals[-1] == [1, 2, 3]
    p.isr_change_answered(ErrorCode.NONE, 0, [1, 2, 3], 1)
    assert p.isr == [1, 2, 3] and len(proposals) == 3


def test_follower_appends_as_is_and_truncates(tmp_path: Path) -> None:
    source = leader(tmp_path / "a", isr=[1])
    source.append(batch(2), 1000)
    source.append(batch(1), 1000)
    log = Log.open(tmp_path / "b" / "t-0", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    follower = Partition("t", 0, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=2)
    follower.make_follower(0, 0, 1, (1, 2))
    data = source.read(0, 1 << 20, upper_bound=source.log_end_offset, min_one=True).read_bytes()
    follower.follower_append(data, 3, 0, 1000)
    assert follower.log_end_offset == 3 and follower.high_watermark == 3
    assert follower.end_offset_for_epoch(0) == (0, 3)
    follower.truncate_to(2)
    assert follower.log_end_offset == 2


def test_parked_fetches_wake_only_when_they_can_return_something(tmp_path: Path) -> None:
    asyncio.run(_parked_fetches(tmp_path))


async def _parked_fetches(tmp_path: Path) -> None:
    """Kafka's DelayedFetch rules: a follower's fetch completes on records past the log end it saw,
    a consumer's when the high watermark moves. A follower fetching at the log end moves nothing,
    so it wakes nobody: idle followers and consumers must not answer each other empty."""
    p = leader(tmp_path, isr=[1, 2, 3])
    consumer, follower = p.waiter(), p.waiter(replica=True)
    p.update_follower(2, 0, 1001)
    p.update_follower(3, 0, 1002)
    assert not consumer.done() and not follower.done()
    p.append(batch(2), 1003)
    assert follower.done() and not consumer.done()  # records past the follower's end; none below the HW
    follower = p.waiter(replica=True)
    p.update_follower(2, 2, 1004)
    assert not consumer.done() and not follower.done()  # 3 has not fetched them: the HW stays
    p.update_follower(3, 2, 1005)
    assert p.high_watermark == 2 and consumer.done() and not follower.done()
    consumer = p.waiter()
    p.make_follower(1, 1, 2)
    assert consumer.done() and follower.done()  # leadership moved: everyone answers


def test_a_follower_answer_that_moves_nothing_wakes_nobody(tmp_path: Path) -> None:
    asyncio.run(_follower_side_wakes(tmp_path))


async def _follower_side_wakes(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    p = Partition("t", 0, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=2)
    p.make_follower(0, 0, 1, (1, 2))
    reader = p.waiter()  # a consumer reading from this follower (KIP-392)
    p.follower_append(b"", 0, 0, 1000)
    assert not reader.done()
    p.follower_append(batch(2).bytes_view(), 0, 0, 1001)
    assert reader.done()
