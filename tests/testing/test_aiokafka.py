"""aiokafka's retry, reconnect and rebalance logic against injected faults (the broker runs on its
own loop in another thread; the client on the test's own asyncio loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from grete.protocol.errors import ErrorCode
from grete.testing import RunningBroker


def _producer(b: RunningBroker, **extra: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, retry_backoff_ms=20, linger_ms=0, **extra)


async def _values(b: RunningBroker, topic: str, expected: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=b.bootstrap_servers, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        values: list[bytes] = []
        while True:  # read until one more than expected (a duplicate) or 1 s of silence
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                return values
            values += [m.value for msgs in batch.values() for m in msgs]
            if len(values) > expected:
                return values
    finally:
        await consumer.stop()


def test_retriable_errors_are_retried_without_duplicates(grete_broker: RunningBroker, grete_topic: str) -> None:
    async def scenario() -> None:
        producer = _producer(grete_broker, enable_idempotence=True)
        await producer.start()
        try:
            with grete_broker.faults.fail("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, times=3) as fault:
                results = [await producer.send_and_wait(grete_topic, f"v{i}".encode(), partition=0)
                           for i in range(5)]
                assert fault.hits == 3
        finally:
            await producer.stop()
        assert [r.offset for r in results] == [0, 1, 2, 3, 4]
        assert await _values(grete_broker, grete_topic, 5) == [f"v{i}".encode() for i in range(5)]
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_non_retriable_error_surfaces(grete_broker: RunningBroker, grete_topic: str) -> None:
    async def scenario() -> None:
        producer = _producer(grete_broker)
        await producer.start()
        try:
            with grete_broker.faults.fail("Produce", ErrorCode.TOPIC_AUTHORIZATION_FAILED) as fault:
                with pytest.raises(TopicAuthorizationFailedError):
                    await producer.send_and_wait(grete_topic, b"denied", partition=0)
                assert fault.hits == 1
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_delay_makes_the_client_time_out(grete_broker: RunningBroker, grete_topic: str) -> None:
    async def scenario() -> None:
        producer = _producer(grete_broker, request_timeout_ms=400)
        await producer.start()
        try:
            with grete_broker.faults.delay("Produce", 3.0):
                started = time.monotonic()
                with pytest.raises(KafkaError):
                    await producer.send_and_wait(grete_topic, b"slow", partition=0)
                assert time.monotonic() - started < 2.5
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_dropped_connections_are_reestablished(grete_broker: RunningBroker, grete_topic: str) -> None:
    async def scenario() -> None:
        producer = _producer(grete_broker)
        await producer.start()
        try:
            assert (await producer.send_and_wait(grete_topic, b"before", partition=0)).offset == 0
            assert grete_broker.faults.drop_connections() >= 1
            assert (await producer.send_and_wait(grete_topic, b"after", partition=0)).offset == 1
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(scenario(), 30))


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned += 1


def test_expired_member_rejoins_after_a_rebalance(grete_broker: RunningBroker, grete_topic: str) -> None:
    async def scenario() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=grete_broker.bootstrap_servers, group_id="expiring",
                                    heartbeat_interval_ms=100, session_timeout_ms=6000)
        listener = _Assignments()
        consumer.subscribe([grete_topic], listener=listener)
        await consumer.start()
        try:
            await _until(consumer, lambda: listener.assigned == 1)
            [member] = grete_broker.group_members("expiring")
            grete_broker.faults.expire_member("expiring", member)
            await _until(consumer, lambda: listener.assigned == 2)
            [rejoined] = grete_broker.group_members("expiring")
            assert rejoined != member
        finally:
            await consumer.stop()
    asyncio.run(asyncio.wait_for(scenario(), 30))


async def _until(consumer: AIOKafkaConsumer, condition: Callable[[], bool]) -> None:
    while not condition():
        await consumer.getmany(timeout_ms=50)
