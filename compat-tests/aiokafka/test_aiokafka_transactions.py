"""aiokafka transactions against the broker: commit and abort, isolation levels, consume-transform-
produce with send_offsets_to_transaction (aiokafka passes the group id only, so the broker sees
generation -1), zombie fencing, the broker's transaction timeout, and the last stable offset."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka_helpers import started_consumer, started_producer, take, unique, wait_until

pytestmark = pytest.mark.compat

TIMEOUT = 30.0  # bounds start() (InitProducerId) when no transaction coordinator answers


async def txn_producer(bootstrap: str, txn_id: str | None = None, **config: Any) -> AIOKafkaProducer:
    return await asyncio.wait_for(
        started_producer(bootstrap, transactional_id=txn_id or unique("aiotx"), **config), TIMEOUT)


async def send(p: AIOKafkaProducer, topic: str, values: list[bytes], partition: int = 0) -> None:
    for v in values:
        await (await p.send(topic, value=v, partition=partition))


async def read_all(bootstrap: str, topic: str, isolation: str, settle: float = 1.0) -> list[Any]:
    """Every record of partition 0 readable at ``isolation``: up to the end offset at that level (the
    LSO for read_committed), then ``settle`` s more to see that nothing else comes."""
    c = await started_consumer(bootstrap, isolation_level=isolation)
    got: list[Any] = []
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        end = (await c.end_offsets([tp]))[tp]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        quiet_until = float("inf")
        while loop.time() < min(deadline, quiet_until):
            for records in (await c.getmany(timeout_ms=200)).values():
                got.extend(records)
            if quiet_until == float("inf") and await c.position(tp) >= end:
                quiet_until = loop.time() + settle
        assert quiet_until != float("inf"), f"never reached the end offset {end}"
        return got
    finally:
        await c.stop()


async def end_offset(bootstrap: str, topic: str, isolation: str) -> int:
    c = await started_consumer(bootstrap, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        return int((await c.end_offsets([tp]))[tp])
    finally:
        await c.stop()


def test_commit_and_abort(broker, make_topic) -> None:
    topic = make_topic()

    async def go() -> None:
        p = await txn_producer(broker.bootstrap)
        try:
            async with p.transaction():
                await send(p, topic, [b"v0", b"v1", b"v2"])
            await p.begin_transaction()
            await send(p, topic, [b"v3", b"v4"])
            await p.abort_transaction()
            async with p.transaction():
                await send(p, topic, [b"v5", b"v6", b"v7", b"v8"])
        finally:
            await p.stop()
        committed = await read_all(broker.bootstrap, topic, "read_committed")
        assert [r.value for r in committed] == [b"v0", b"v1", b"v2", b"v5", b"v6", b"v7", b"v8"]
        everything = await read_all(broker.bootstrap, topic, "read_uncommitted")
        assert [r.value for r in everything] == [f"v{i}".encode() for i in range(9)]
        assert [r.offset for r in everything] == [0, 1, 2, 4, 5, 7, 8, 9, 10]

    asyncio.run(go())


def test_consume_transform_produce(broker, make_topic) -> None:
    src, dst = make_topic(), make_topic()
    n = 6
    group = unique("aioctp")

    async def process(p: AIOKafkaProducer, outcome: str) -> int | None:
        c = await started_consumer(broker.bootstrap, src, group_id=group, isolation_level="read_committed")
        try:
            batch = await take(c, n)
            tp = TopicPartition(src, 0)
            await p.begin_transaction()
            await send(p, dst, [r.value.replace(b"in-", b"out-") for r in batch])
            await p.send_offsets_to_transaction({tp: batch[-1].offset + 1}, group)
            await (p.commit_transaction() if outcome == "commit" else p.abort_transaction())
            # EndTxn returns before the commit marker reaches __consumer_offsets, and aiokafka's
            # OffsetFetch does not ask for stable offsets: wait for the pending offset to settle.
            seen: list[int | None] = [None]

            async def fetch() -> None:
                seen[0] = await c.committed(tp)

            if outcome == "commit":
                await wait_until(lambda: seen[0] is not None, 15, step=fetch, what="the committed offset")
            else:
                await asyncio.sleep(1.0)
                await fetch()
            return seen[0]
        finally:
            await c.stop()

    async def go() -> None:
        plain = await started_producer(broker.bootstrap)
        try:
            await send(plain, src, [f"in-{i}".encode() for i in range(n)])
        finally:
            await plain.stop()
        p = await txn_producer(broker.bootstrap)
        try:
            assert await process(p, "abort") is None  # aborted offsets are discarded
            assert await process(p, "commit") == n
        finally:
            await p.stop()
        out = await read_all(broker.bootstrap, dst, "read_committed")
        assert [r.value for r in out] == [f"out-{i}".encode() for i in range(n)]
        assert len(await read_all(broker.bootstrap, dst, "read_uncommitted")) == 2 * n

    asyncio.run(go())


def test_second_producer_fences_the_first(broker, make_topic) -> None:
    topic = make_topic()
    txn_id = unique("aiozombie")

    async def go() -> None:
        zombie = await txn_producer(broker.bootstrap, txn_id)
        try:
            await zombie.begin_transaction()
            await send(zombie, topic, [b"from-zombie"])
            fresh = await txn_producer(broker.bootstrap, txn_id)
            try:
                async with fresh.transaction():
                    await send(fresh, topic, [b"from-fresh"])
            finally:
                await fresh.stop()
            with pytest.raises(KafkaError) as caught:
                await asyncio.wait_for(zombie.commit_transaction(), TIMEOUT)
            assert type(caught.value).__name__ in ("ProducerFenced", "InvalidProducerEpoch"), caught.value
        finally:
            await zombie.stop()
        assert [r.value for r in await read_all(broker.bootstrap, topic, "read_committed")] == [b"from-fresh"]

    asyncio.run(go())


def test_broker_aborts_a_transaction_that_times_out(broker, make_topic) -> None:
    topic = make_topic()

    async def go() -> None:
        p = await txn_producer(broker.bootstrap, transaction_timeout_ms=1000)
        try:
            await p.begin_transaction()
            await send(p, topic, [b"expires-1", b"expires-2"])
            assert await end_offset(broker.bootstrap, topic, "read_committed") == 0
            last: list[int] = []

            async def probe() -> None:
                last[:] = [await end_offset(broker.bootstrap, topic, "read_committed")]

            # The broker's abort marker (offset 2) moves the LSO past the two records.
            await wait_until(lambda: last == [3], 30, step=probe, what="the broker aborting the transaction")
            assert await read_all(broker.bootstrap, topic, "read_committed") == []
        finally:
            await p.stop()

    asyncio.run(go())


def test_end_offsets_read_committed_stop_at_lso(broker, make_topic) -> None:
    topic = make_topic()

    async def go() -> None:
        plain = await started_producer(broker.bootstrap)
        p = await txn_producer(broker.bootstrap)
        try:
            await send(plain, topic, [b"plain-0", b"plain-1"])
            await p.begin_transaction()
            await send(p, topic, [b"t-0", b"t-1", b"t-2"])
            assert await end_offset(broker.bootstrap, topic, "read_uncommitted") == 5
            assert await end_offset(broker.bootstrap, topic, "read_committed") == 2
            await p.commit_transaction()
            assert await end_offset(broker.bootstrap, topic, "read_committed") == 6
        finally:
            await p.stop()
            await plain.stop()

    asyncio.run(go())


def test_open_transaction_blocks_read_committed(broker, make_topic) -> None:
    topic = make_topic()

    async def go() -> None:
        plain = await started_producer(broker.bootstrap)
        p = await txn_producer(broker.bootstrap)
        reader: AIOKafkaConsumer = await started_consumer(broker.bootstrap, isolation_level="read_committed")
        try:
            await send(plain, topic, [b"before"])
            await p.begin_transaction()
            await send(p, topic, [b"in-txn"])
            await send(plain, topic, [b"after-0", b"after-1"])
            tp = TopicPartition(topic, 0)
            reader.assign([tp])
            await reader.seek_to_beginning(tp)
            got = [r.value for r in await take(reader, 1)]
            await asyncio.sleep(2.0)
            got += [r.value for rs in (await reader.getmany(timeout_ms=500)).values() for r in rs]
            assert got == [b"before"]  # held back behind the open transaction's first offset
            await p.abort_transaction()
            assert [r.value for r in await take(reader, 2)] == [b"after-0", b"after-1"]
        finally:
            await reader.stop()
            await p.stop()
            await plain.stop()

    asyncio.run(go())
