"""kafka-python producing and consuming: codecs, keys, headers, timestamps, idempotence, limits."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka import TopicPartition
from kafka.errors import MessageSizeTooLargeError
from kafka_python_helpers import consumer, producer, read_partition, take

pytestmark = pytest.mark.compat

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_round_trip_with_codec(broker, make_topic: Callable[..., str], codec: str | None) -> None:
    topic = make_topic()
    values = [(f"value-{i:04d}-" + "xyz" * (i % 40)).encode() for i in range(200)]
    p = producer(broker.bootstrap, compression_type=codec, batch_size=4096)
    futures = [p.send(topic, key=f"k{i}".encode(), value=v) for i, v in enumerate(values)]
    p.flush(30)
    # Idempotence is on by default in kafka-python 3: order is kept, offsets follow send order.
    assert [f.get(timeout=10).offset for f in futures] == list(range(200))
    p.close()
    got = read_partition(broker.bootstrap, topic, 0, 200)
    assert [r.value for r in got] == values
    assert [r.key for r in got] == [f"k{i}".encode() for i in range(200)]


def test_same_key_same_partition(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=6)
    keys = [f"user-{i}".encode() for i in range(30)]
    placed: dict[bytes, set[int]] = {}
    for _ in range(2):  # two producer instances: the murmur2 choice must not depend on the instance
        p = producer(broker.bootstrap)
        futures = [(k, p.send(topic, key=k, value=b"v")) for _ in range(3) for k in keys]
        p.flush(30)
        for k, f in futures:
            placed.setdefault(k, set()).add(f.get(timeout=10).partition)
        p.close()
    assert all(len(parts) == 1 for parts in placed.values()), placed
    assert len({next(iter(s)) for s in placed.values()}) > 1
    # Stored where the client chose: read partition 0's records back.
    mine = [k for k, s in placed.items() if s == {0}]
    got = read_partition(broker.bootstrap, topic, 0, len(mine) * 6)
    assert {r.key for r in got} == set(mine)


def test_headers_round_trip(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    # kafka-python refuses a None header value on send (Kafka allows it): see FINDINGS.md.
    headers = [("trace", b"abc"), ("dup", b"1"), ("dup", b"2"), ("empty", b""), ("unicode-\u00e9", b"\xc3")]
    p = producer(broker.bootstrap)
    p.send(topic, value=b"with", headers=headers)
    p.send(topic, value=b"without")
    p.flush(30)
    p.close()
    got = read_partition(broker.bootstrap, topic, 0, 2)
    assert list(got[0].headers) == headers
    assert list(got[1].headers) == []


def test_offsets_for_times_and_seek(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 60_000
    p = producer(broker.bootstrap, linger_ms=0)
    for i in range(10):
        p.send(topic, value=f"v{i}".encode(), timestamp_ms=base + i * 1000)
    p.flush(30)
    p.close()
    got = read_partition(broker.bootstrap, topic, 0, 10)
    assert [r.timestamp for r in got] == [base + i * 1000 for i in range(10)]
    tp = TopicPartition(topic, 0)
    c = consumer(broker.bootstrap)
    try:
        found = c.offsets_for_times({tp: base + 5500})[tp]
        assert (found.offset, found.timestamp) == (6, base + 6000)
        assert c.offsets_for_times({tp: base - 1})[tp].offset == 0
        assert c.offsets_for_times({tp: base + 9001})[tp] is None  # past the last record
        c.assign([tp])
        c.seek(tp, found.offset)
        assert take(c, 1)[0].value == b"v6"
        assert c.beginning_offsets([tp])[tp] == 0
        assert c.end_offsets([tp])[tp] == 10
    finally:
        c.close()


def test_idempotent_producer_no_duplicates(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    p = producer(broker.bootstrap, enable_idempotence=True, acks="all", retries=10,
                 max_in_flight_requests_per_connection=5)
    n = 3000
    for i in range(n):
        p.send(topic, key=str(i % 17).encode(), value=str(i).encode())
    p.flush(60)
    p.close()
    c = consumer(broker.bootstrap)
    try:
        parts = [TopicPartition(topic, i) for i in range(3)]
        c.assign(parts)
        got = take(c, n)
    finally:
        c.close()
    assert sorted(int(r.value) for r in got) == list(range(n))
    for part in range(3):
        seq = [int(r.value) for r in got if r.partition == part]
        assert seq == sorted(seq)


def test_oversized_message_refused_by_broker(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"max.message.bytes": "2048"})
    p = producer(broker.bootstrap, compression_type=None)
    big = p.send(topic, value=b"x" * 8000)
    p.flush(30)
    with pytest.raises(MessageSizeTooLargeError):
        big.get(timeout=10)
    p.close()
    # kafka-python 3 (idempotent by default) treats the refusal as fatal for the producer, so the
    # next record goes through a new one.
    p = producer(broker.bootstrap)
    assert p.send(topic, value=b"small").get(timeout=10).offset == 0
    p.close()


def test_oversized_message_refused_by_client(broker, make_topic: Callable[..., str]) -> None:
    """kafka-python's own max_request_size check: send() fails before any request is made."""
    topic = make_topic()
    p = producer(broker.bootstrap, max_request_size=10_000)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            p.send(topic, value=b"x" * 20_000).get(timeout=10)
    finally:
        p.close()


def test_read_committed_without_transactions(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    p = producer(broker.bootstrap)
    for i in range(25):
        p.send(topic, value=f"m{i}".encode())
    p.flush(30)
    p.close()
    got = read_partition(broker.bootstrap, topic, 0, 25, isolation_level="read_committed")
    assert [r.value for r in got] == [f"m{i}".encode() for i in range(25)]
