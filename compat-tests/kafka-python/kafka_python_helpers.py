"""Small helpers shared by the kafka-python compat tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from tools.testwait import wait_until  # noqa: F401  (re-exported to the tests)


def unique(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def producer(bootstrap: str, **config: Any) -> KafkaProducer:
    return KafkaProducer(**{"bootstrap_servers": bootstrap, "linger_ms": 5, **config})


def consumer(bootstrap: str, **config: Any) -> KafkaConsumer:
    base: dict[str, Any] = {"bootstrap_servers": bootstrap, "auto_offset_reset": "earliest",
                            "enable_auto_commit": False, "consumer_timeout_ms": 20_000}
    return KafkaConsumer(**{**base, **config})


def subscribe(c: KafkaConsumer, topics: list[str], **listener: Any) -> None:
    """Subscribe, then learn the topics' partitions before the first poll joins the group.

    Otherwise a leader may assign before its metadata names the topics and rejoin when it does;
    kafka-python 3.0.12 drops the answer to that rejoin if a poll times out meanwhile, and the
    member stops heartbeating (FINDINGS.md)."""
    c.subscribe(topics, **listener)
    for topic in topics:
        c.partitions_for_topic(topic)


def take(c: KafkaConsumer, n: int, timeout: float = 20.0) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200, max_records=n - len(got)).values():
            got.extend(records)
    assert len(got) == n, f"got {len(got)} of {n} records within {timeout}s"
    return got


def read_partition(bootstrap: str, topic: str, partition: int, n: int, **config: Any) -> list[ConsumerRecord]:
    c = consumer(bootstrap, **config)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return take(c, n)
    finally:
        c.close()


