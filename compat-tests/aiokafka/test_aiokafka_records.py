"""aiokafka producing and consuming: codecs, keys, headers, timestamps, idempotence, limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka_helpers import read_partition, started_consumer, started_producer, take

pytestmark = pytest.mark.compat

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_round_trip_with_codec(broker, make_topic: Callable[..., str], codec: str | None) -> None:
    topic = make_topic()
    values = [(f"value-{i:04d}-" + "qrs" * (i % 40)).encode() for i in range(200)]

    async def run() -> None:
        p = await started_producer(broker.bootstrap, compression_type=codec, max_batch_size=4096)
        try:
            futures = [await p.send(topic, key=f"k{i}".encode(), value=v) for i, v in enumerate(values)]
            offsets = [(await f).offset for f in futures]
        finally:
            await p.stop()
        assert offsets == list(range(200))
        got = await read_partition(broker.bootstrap, topic, 0, 200)
        assert [r.value for r in got] == values
        assert [r.key for r in got] == [f"k{i}".encode() for i in range(200)]
    asyncio.run(run())


def test_same_key_same_partition(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=6)
    keys = [f"user-{i}".encode() for i in range(30)]

    async def run() -> None:
        placed: dict[bytes, set[int]] = {}
        for _ in range(2):  # two producer instances agree on every key's partition
            p = await started_producer(broker.bootstrap)
            try:
                for _ in range(3):
                    for k in keys:
                        meta = await p.send_and_wait(topic, key=k, value=b"v")
                        placed.setdefault(k, set()).add(meta.partition)
            finally:
                await p.stop()
        assert all(len(s) == 1 for s in placed.values()), placed
        assert len({next(iter(s)) for s in placed.values()}) > 1
        mine = [k for k, s in placed.items() if s == {0}]
        got = await read_partition(broker.bootstrap, topic, 0, len(mine) * 6)
        assert {r.key for r in got} == set(mine)
    asyncio.run(run())


def test_headers_round_trip(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    headers = [("trace", b"abc"), ("dup", b"1"), ("dup", b"2"), ("empty", b""), ("none", None)]

    async def run() -> None:
        p = await started_producer(broker.bootstrap)
        try:
            await p.send_and_wait(topic, value=b"with", headers=headers)
            await p.send_and_wait(topic, value=b"without")
        finally:
            await p.stop()
        got = await read_partition(broker.bootstrap, topic, 0, 2)
        assert list(got[0].headers) == headers
        assert list(got[1].headers) == []
    asyncio.run(run())


def test_offsets_for_times_and_seek(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 60_000
    tp = TopicPartition(topic, 0)

    async def run() -> None:
        p = await started_producer(broker.bootstrap, linger_ms=0)
        try:
            for i in range(10):
                await p.send_and_wait(topic, value=f"v{i}".encode(), timestamp_ms=base + i * 1000)
        finally:
            await p.stop()
        c = await started_consumer(broker.bootstrap)
        try:
            found = (await c.offsets_for_times({tp: base + 5500}))[tp]
            assert (found.offset, found.timestamp) == (6, base + 6000)
            assert (await c.offsets_for_times({tp: base - 1}))[tp].offset == 0
            assert (await c.offsets_for_times({tp: base + 9001}))[tp] is None
            c.assign([tp])
            c.seek(tp, found.offset)
            (rec,) = await take(c, 1)
            assert (rec.value, rec.timestamp) == (b"v6", base + 6000)
            assert (await c.beginning_offsets([tp]))[tp] == 0
            assert (await c.end_offsets([tp]))[tp] == 10
        finally:
            await c.stop()
    asyncio.run(run())


def test_idempotent_producer_no_duplicates(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    n = 3000

    async def run() -> None:
        p = await started_producer(broker.bootstrap, enable_idempotence=True, acks="all")
        try:
            futures = [await p.send(topic, key=str(i % 17).encode(), value=str(i).encode()) for i in range(n)]
            await asyncio.gather(*futures)
        finally:
            await p.stop()
        c = await started_consumer(broker.bootstrap)
        try:
            c.assign([TopicPartition(topic, i) for i in range(3)])
            got = await take(c, n)
        finally:
            await c.stop()
        assert sorted(int(r.value) for r in got) == list(range(n))
        for part in range(3):
            seq = [int(r.value) for r in got if r.partition == part]
            assert seq == sorted(seq)
    asyncio.run(run())


def test_oversized_message_refused_by_broker(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"max.message.bytes": "2048"})

    async def run() -> None:
        p = await started_producer(broker.bootstrap)
        try:
            with pytest.raises(MessageSizeTooLargeError):
                await p.send_and_wait(topic, value=b"x" * 8000)
            assert (await p.send_and_wait(topic, value=b"small")).offset == 0
        finally:
            await p.stop()
    asyncio.run(run())


def test_oversized_message_refused_by_client(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()

    async def run() -> None:
        p = await started_producer(broker.bootstrap, max_request_size=10_000)
        try:
            with pytest.raises(MessageSizeTooLargeError):
                await p.send(topic, value=b"x" * 20_000)
        finally:
            await p.stop()
    asyncio.run(run())


def test_read_committed_without_transactions(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()

    async def run() -> None:
        p = await started_producer(broker.bootstrap)
        try:
            for i in range(25):
                await p.send(topic, value=f"m{i}".encode())
            await p.flush()
        finally:
            await p.stop()
        got = await read_partition(broker.bootstrap, topic, 0, 25, isolation_level="read_committed")
        assert [r.value for r in got] == [f"m{i}".encode() for i in range(25)]
    asyncio.run(run())
