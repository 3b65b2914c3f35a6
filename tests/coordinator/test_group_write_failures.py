"""A coordinator whose writes to __consumer_offsets fail answers Kafka's codes for the failure and does
not churn generations while clients retry (it once went through thousands of generations a second
when the disk was full: join, the assignment could not be written, rejoin, a new generation...)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import pytest

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore, OffsetsStore, Record
from grete.coordinator.groups.group_types import JoinResult
from grete.protocol.errors import ErrorCode, KafkaError
from grete.testing.inprocess import broker
from tests.coordinator._support import async_test, join, join_all, settle, started, sync, task

RETRY_ROUNDS = 60  # counted, not timed: a loaded machine must not change what is checked

# What the store raises -> what Kafka answers a SyncGroup whose assignment it could not write.
FAILURES = [
    (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REBALANCE_IN_PROGRESS),
]


async def _client_round(coord: GroupCoordinator, member_id: str) -> tuple[str, JoinResult, ErrorCode]:
    """One pass of a consumer's rebalance loop as librdkafka runs it: JoinGroup (v4+: the first one
    only gets a member id), SyncGroup with an assignment when leading; no back-off on errors."""
    joined = await join(coord, member_id=member_id, require_known=True)
    if joined.error is ErrorCode.MEMBER_ID_REQUIRED:
        joined = await join(coord, member_id=joined.member_id, require_known=True)
    if joined.error is not ErrorCode.NONE:
        return joined.member_id, joined, joined.error
    assignments = [(m.member_id, b"assigned") for m in joined.members]
    synced = await sync(coord, joined, assignments=assignments)
    return joined.member_id, joined, synced.error


@pytest.mark.parametrize("failure, answer", FAILURES, ids=[f.name for f, _ in FAILURES])
@async_test
async def test_clients_retrying_against_failing_writes_do_not_advance_generations(
        failure: ErrorCode, answer: ErrorCode) -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    store.fail_with = KafkaError(failure)
    member_id, answers = "", set()
    for _ in range(RETRY_ROUNDS):  # a client retrying without back-off, as librdkafka's loop does
        member_id, _, error = await _client_round(coord, member_id)
        answers.add(error)
    assert answers == {answer}
    group = coord.groups["g"]
    assert group.generation_id == 1 and coord.describe_group("g").state == "CompletingRebalance"
    # The log heals: the next retry completes the same generation.
    store.fail_with = None
    _, joined, error = await _client_round(coord, member_id)
    assert error is ErrorCode.NONE and joined.generation_id == 1
    assert coord.describe_group("g").state == "Stable"
    assert group.members[member_id].assignment == b"assigned"
    await coord.shutdown()


@async_test
async def test_followers_are_told_and_the_group_keeps_its_generation() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    first, second = await join_pair(coord)
    leader, follower = (first, second) if first.leader == first.member_id else (second, first)
    parked = task(sync(coord, follower))
    await settle()
    store.fail_with = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    res = await sync(coord, leader, assignments=[(leader.member_id, b"x"), (follower.member_id, b"y")])
    assert res.error is ErrorCode.NOT_COORDINATOR and (await parked).error is ErrorCode.NOT_COORDINATOR
    assert coord.describe_group("g").state == "CompletingRebalance"
    store.fail_with = None
    # Both rejoin into the same generation and sync again; the write succeeds this time.
    again_leader, again_follower = await join_pair(coord, leader.member_id, follower.member_id)
    assert again_leader.generation_id == again_follower.generation_id == leader.generation_id
    parked = task(sync(coord, again_follower))
    await settle()
    res = await sync(coord, again_leader, assignments=[(leader.member_id, b"x"), (follower.member_id, b"y")])
    assert res.error is ErrorCode.NONE and (await parked).assignment == b"y"
    assert coord.describe_group("g").state == "Stable"
    await coord.shutdown()


@async_test
async def test_members_that_do_not_sync_again_are_removed() -> None:
    """Keeping the generation must not keep a member that never comes back."""
    store = InMemoryOffsetsStore()
    coord = await started(store)
    joined = await join(coord)
    store.fail_with = KafkaError(ErrorCode.KAFKA_STORAGE_ERROR)
    assert (await sync(coord, joined, assignments=[(joined.member_id, b"x")])).error is ErrorCode.NOT_COORDINATOR
    store.fail_with = None
    for _ in range(100):  # the rebalance timeout (400 ms) removes it; the group ends up Empty
        await settle()
        if coord.describe_group("g").state == "Empty":
            break
        await asyncio.sleep(0.02)
    assert coord.describe_group("g").state == "Empty" and not coord.groups["g"].members
    await coord.shutdown()


async def join_pair(coord: GroupCoordinator, *member_ids: str) -> list[JoinResult]:
    ids = member_ids or ("", "")
    return await join_all(*(join(coord, member_id=m) for m in ids))


class _FailingAppends:
    """The broker's own store, but every plain append fails as a full log dir makes it fail."""

    def __init__(self, inner: OffsetsStore, code: ErrorCode) -> None:
        self.inner = inner
        self.code = code

    async def append(self, partition: int, records: list[Record]) -> None:
        raise KafkaError(self.code)

    async def append_txn(self, partition: int, records: list[Record], producer_id: int,
                         producer_epoch: int) -> None:
        raise KafkaError(self.code)

    def read(self, partition: int) -> Iterable[Record]:
        return self.inner.read(partition)

    def open_transactions(self, partition: int) -> dict[int, list[Record]]:
        return self.inner.open_transactions(partition)


def test_a_real_consumer_against_a_coordinator_that_cannot_write() -> None:
    """librdkafka rejoins at once after a failed SyncGroup; the group stays in its first generation."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with broker({"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}) as b:
        b.create_topic("t", 1)
        coordinator: GroupCoordinator = b.broker.group_coordinator

        def install() -> None:
            coordinator.ctx.store = _FailingAppends(coordinator.ctx.store, ErrorCode.KAFKA_STORAGE_ERROR)
        b.call(install)
        consumer = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g",
                                             "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment() == []
        generations = b.call(lambda: {g: grp.generation_id for g, grp in coordinator.groups.items()})
        consumer.close()
        assert generations == {"g": 1}
