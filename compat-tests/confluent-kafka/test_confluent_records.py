"""confluent-kafka (librdkafka) producing and consuming: codecs, keys, headers, timestamps,
idempotence, size limits and the read_committed default."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_helpers import consume_n, consumer, produce_all, producer, read_partition
from confluent_kafka import KafkaError, KafkaException, TopicPartition

pytestmark = pytest.mark.compat

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_codec(broker, make_topic: Callable[..., str], codec: str) -> None:
    topic = make_topic()
    # Repetitive values so every codec really compresses; 200 records span several batches.
    values = [(f"value-{i:04d}-" + "abc" * (i % 50)).encode() for i in range(200)]
    p = producer(broker.bootstrap, **{"compression.type": codec, "batch.num.messages": 50})
    delivered = produce_all(p, topic, ({"key": f"k{i}".encode(), "value": v} for i, v in enumerate(values)))
    assert sorted(m.offset() for m in delivered) == list(range(200))
    got = read_partition(broker.bootstrap, topic, 0, 200)
    assert [m.offset() for m in got] == list(range(200))
    # Without idempotence librdkafka may reorder batches on retry, so compare by offset: each
    # record must come back where its delivery report said it was stored.
    assert {m.offset(): (m.key(), m.value()) for m in got} == \
        {m.offset(): (m.key(), m.value()) for m in delivered}
    assert sorted(m.value() for m in got) == sorted(values)


def test_same_key_same_partition(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=6)
    keys = [f"user-{i}".encode() for i in range(30)]
    records = [{"key": k, "value": f"{k.decode()}#{n}".encode()} for n in range(4) for k in keys]
    first = produce_all(producer(broker.bootstrap), topic, records)
    # A second, independent producer must hash every key to the same partition (murmur2-random
    # default is consistent across instances).
    second = produce_all(producer(broker.bootstrap), topic, records[: len(keys)])
    placed: dict[bytes, set[int]] = {}
    for m in first + second:
        placed.setdefault(m.key(), set()).add(m.partition())
    assert all(len(parts) == 1 for parts in placed.values()), placed
    assert len({p for parts in placed.values() for p in parts}) > 1, "30 keys all hashed to one partition"
    # The broker stored each record in the partition the client chose.
    per_partition = Counter(m.partition() for m in first + second)
    for partition, count in per_partition.items():
        stored = read_partition(broker.bootstrap, topic, partition, count)
        assert all(placed[m.key()] == {partition} for m in stored)


def test_headers_round_trip(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    headers = [("trace", b"abc"), ("dup", b"1"), ("dup", b"2"), ("empty", b""), ("none", None),
               ("unicode-\u00e9", "v\u00e9".encode())]
    produce_all(producer(broker.bootstrap), topic,
                [{"value": b"with", "headers": headers}, {"value": b"without"}])
    got = read_partition(broker.bootstrap, topic, 0, 2)
    assert got[0].headers() == headers
    assert got[1].headers() is None


def test_offsets_for_times(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 60_000
    produce_all(producer(broker.bootstrap, **{"linger.ms": 0}), topic,
                [{"value": f"v{i}".encode(), "timestamp": base + i * 1000} for i in range(10)])
    got = read_partition(broker.bootstrap, topic, 0, 10)
    assert [m.timestamp()[1] for m in got] == [base + i * 1000 for i in range(10)]
    c = consumer(broker.bootstrap)
    try:
        def lookup(ts: int) -> int:
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None
            return tp.offset
        assert lookup(base - 5) == 0
        assert lookup(base + 5500) == 6  # first record with timestamp >= the query
        assert lookup(base + 9000) == 9
        assert lookup(base + 9001) == -1  # past the last: OFFSET_END
        # Seeking to the looked-up offset resumes exactly there.
        c.assign([TopicPartition(topic, 0, lookup(base + 3000))])
        assert consume_n(c, 1)[0].value() == b"v3"
    finally:
        c.close()


def test_idempotent_producer_no_duplicates(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    p = producer(broker.bootstrap, **{"enable.idempotence": True, "acks": "all",
                                      "max.in.flight.requests.per.connection": 5,
                                      "message.send.max.retries": 10, "batch.num.messages": 100})
    n = 3000
    produce_all(p, topic, ({"key": str(i % 17).encode(), "value": str(i).encode()} for i in range(n)))
    c = consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, part, 0) for part in range(3)])
        got = consume_n(c, n)
    finally:
        c.close()
    values = [int(m.value()) for m in got]
    assert sorted(values) == list(range(n)), "duplicates or losses"
    for part in range(3):  # per-partition order = send order
        seq = [int(m.value()) for m in got if m.partition() == part]
        assert seq == sorted(seq)


def test_oversized_message_refused(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"max.message.bytes": "2048"})
    errors: list[KafkaError] = []
    ok: list[int] = []
    p = producer(broker.bootstrap, **{"compression.type": "none"})
    # Separate flushes: the broker refuses a whole batch, so the small one must not share it.
    p.produce(topic, value=b"x" * 8000, on_delivery=lambda e, m: errors.append(e) if e else ok.append(1))
    p.flush(30)
    p.produce(topic, value=b"small", on_delivery=lambda e, m: errors.append(e) if e else ok.append(1))
    p.flush(30)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert ok == [1]
    got = read_partition(broker.bootstrap, topic, 0, 1)
    assert got[0].value() == b"small"


def test_client_side_limit_raises_before_sending(broker, make_topic: Callable[..., str]) -> None:
    """librdkafka's own message.max.bytes check: produce() raises, nothing reaches the broker."""
    topic = make_topic()
    p = producer(broker.bootstrap, **{"message.max.bytes": 10_000})
    with pytest.raises(KafkaException) as info:
        p.produce(topic, value=b"x" * 20_000)
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_read_committed_default_without_transactions(broker, make_topic: Callable[..., str]) -> None:
    """librdkafka defaults to isolation.level=read_committed: it reads up to the last stable offset,
    which must equal the high watermark when no transaction is open."""
    topic = make_topic()
    produce_all(producer(broker.bootstrap), topic, [{"value": f"m{i}".encode()} for i in range(25)])
    c = consumer(broker.bootstrap)  # no isolation.level: the default
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_n(c, 25)
        assert [m.value() for m in got] == [f"m{i}".encode() for i in range(25)]
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 25)
        assert c.position([TopicPartition(topic, 0)])[0].offset == 25
    finally:
        c.close()
    uncommitted = read_partition(broker.bootstrap, topic, 0, 25, **{"isolation.level": "read_uncommitted"})
    assert len(uncommitted) == 25
