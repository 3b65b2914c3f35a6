"""Small helpers shared by the aiokafka compat tests (plain pytest: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition


def unique(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def started_producer(bootstrap: str, **config: Any) -> AIOKafkaProducer:
    p = AIOKafkaProducer(**{"bootstrap_servers": bootstrap, "linger_ms": 5, **config})
    await p.start()
    return p


async def started_consumer(bootstrap: str, *topics: str, **config: Any) -> AIOKafkaConsumer:
    base: dict[str, Any] = {"bootstrap_servers": bootstrap, "auto_offset_reset": "earliest",
                            "enable_auto_commit": False}
    c = AIOKafkaConsumer(*topics, **{**base, **config})
    await c.start()
    return c


async def take(c: AIOKafkaConsumer, n: int, timeout: float = 20.0) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < n and loop.time() < deadline:
        batches = await c.getmany(timeout_ms=200, max_records=n - len(got))
        for records in batches.values():
            got.extend(records)
    assert len(got) == n, f"got {len(got)} of {n} records within {timeout}s"
    return got


async def read_partition(bootstrap: str, topic: str, partition: int, n: int,
                         **config: Any) -> list[ConsumerRecord]:
    c = await started_consumer(bootstrap, **config)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        return await take(c, n)
    finally:
        await c.stop()


async def wait_until(cond: Callable[[], bool], timeout: float,
                     step: Callable[[], Awaitable[object]] | None = None, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if step is not None:
            await step()
        if cond():
            return
        if step is None:
            await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")
