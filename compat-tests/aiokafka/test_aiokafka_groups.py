"""aiokafka consumer groups: rebalancing, static membership, committed offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from aiokafka_helpers import started_consumer, started_producer, take, unique, wait_until

pytestmark = pytest.mark.compat

PARTITIONS = 6


class Member(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: set[int] = set()
        self.revokes = 0
        self.seen: list[tuple[int, int]] = []
        self.consumer: AIOKafkaConsumer | None = None

    @classmethod
    async def join(cls, bootstrap: str, group: str, topic: str, **config: Any) -> Member:
        m = cls()
        settings = {"group_id": group, "session_timeout_ms": 10_000, "heartbeat_interval_ms": 500, **config}
        m.consumer = await started_consumer(bootstrap, **settings)
        m.consumer.subscribe([topic], listener=m)
        return m

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.revokes += 1
        self.assigned = set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned = {tp.partition for tp in assigned}

    async def poll(self) -> None:
        assert self.consumer is not None
        for records in (await self.consumer.getmany(timeout_ms=100)).values():
            self.seen.extend((r.partition, r.offset) for r in records)

    async def close(self) -> None:
        assert self.consumer is not None
        await self.consumer.stop()


def poll_all(members: list[Member]) -> Callable[[], Awaitable[object]]:
    async def step() -> None:
        await asyncio.gather(*(m.poll() for m in members))
    return step


def balanced(members: list[Member]) -> bool:
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assigned for m in members)


async def send_to_partitions(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    p = await started_producer(bootstrap)
    try:
        for partition, value in values:
            await p.send(topic, value=value, partition=partition)
        await p.flush()
    finally:
        await p.stop()


@pytest.mark.slow
def test_group_of_three_rebalances_on_join_and_leave(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = unique()

    async def run() -> None:
        members: list[Member] = []
        try:
            for _ in range(3):
                members.append(await Member.join(broker.bootstrap, group, topic))
                await wait_until(lambda: balanced(members), 60, poll_all(members), f"{len(members)} balanced")
            await send_to_partitions(broker.bootstrap, topic,
                                     [(i % PARTITIONS, str(i).encode()) for i in range(60)])
            await wait_until(lambda: sum(len(m.seen) for m in members) >= 60, 30, poll_all(members), "60 seen")
            seen = sorted(s for m in members for s in m.seen)
            assert seen == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(60))
            for m in members:
                assert {p for p, _ in m.seen} <= m.assigned
                assert m.consumer is not None
                await m.consumer.commit()
            leaver = members.pop()
            await leaver.close()
            await wait_until(lambda: balanced(members), 30, poll_all(members), "2 balanced after leave")
            before = {id(m): len(m.seen) for m in members}
            await send_to_partitions(broker.bootstrap, topic, [(p, b"after") for p in range(PARTITIONS)])
            await wait_until(lambda: sum(len(m.seen) - before[id(m)] for m in members) >= PARTITIONS, 30,
                             poll_all(members), "records after leave")
            new = sorted(s for m in members for s in m.seen[before[id(m)]:])
            assert new == [(p, 10) for p in range(PARTITIONS)]
        finally:
            for m in members:
                await m.close()
    asyncio.run(run())


@pytest.mark.slow
def test_static_member_rejoins_with_same_assignment(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = unique()
    static = {"session_timeout_ms": 30_000}

    async def run() -> None:
        a = await Member.join(broker.bootstrap, group, topic, group_instance_id="a", **static)
        b = await Member.join(broker.bootstrap, group, topic, group_instance_id="b", **static)
        members = [a, b]
        try:
            await wait_until(lambda: balanced(members), 60, poll_all(members), "static group balanced")
            first_a, first_b, b_revokes = set(a.assigned), set(b.assigned), b.revokes
            await a.close()
            await asyncio.sleep(1.0)
            a2 = await Member.join(broker.bootstrap, group, topic, group_instance_id="a", **static)
            members = [a2, b]
            await wait_until(lambda: bool(a2.assigned), 30, poll_all(members), "restarted member assigned")
            for _ in range(20):
                await poll_all(members)()
            assert a2.assigned == first_a
            assert b.assigned == first_b
            assert b.revokes == b_revokes, "the other member was rebalanced"
        finally:
            for m in members:
                await m.close()
    asyncio.run(run())


def test_commit_committed_and_resume(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    group = unique()

    async def run() -> None:
        await send_to_partitions(broker.bootstrap, topic, [(0, f"r{i}".encode()) for i in range(20)])
        c = await started_consumer(broker.bootstrap, group_id=group)
        try:
            c.assign([tp])
            await take(c, 12)
            await c.commit({tp: OffsetAndMetadata(12, "meta-12")})
            assert await c.committed(tp) == 12
        finally:
            await c.stop()
        c2 = await started_consumer(broker.bootstrap, group_id=group)
        try:
            c2.assign([tp])
            got = await take(c2, 8)
            assert [r.value for r in got] == [f"r{i}".encode() for i in range(12, 20)]
            await c2.commit()
            assert await c2.committed(tp) == 20
        finally:
            await c2.stop()
        c3 = await started_consumer(broker.bootstrap, group_id=unique())
        try:
            assert await c3.committed(tp) is None
        finally:
            await c3.stop()
    asyncio.run(run())
