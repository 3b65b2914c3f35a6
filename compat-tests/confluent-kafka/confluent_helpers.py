"""Small helpers shared by the confluent-kafka (librdkafka) compat tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tools.testwait import wait_until  # noqa: F401  (re-exported to the tests)


def group_name(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def producer(bootstrap: str, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})


def consumer(bootstrap: str, group: str | None = None, **config: Any) -> Consumer:
    base: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group or group_name(),
                            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    return Consumer({**base, **config})


def produce_all(p: Producer, topic: str, records: Iterable[dict[str, Any]]) -> list[Message]:
    """Produce every record (kwargs of ``Producer.produce``); flush; return the delivered messages."""
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        (errors.append(err) if err is not None else delivered.append(msg))

    count = 0
    for record in records:
        p.produce(topic, on_delivery=report, **record)
        count += 1
        p.poll(0)
    assert p.flush(30) == 0, "messages left undelivered after 30 s"
    assert not errors, f"delivery errors: {errors}"
    assert len(delivered) == count
    return delivered


def consume_n(c: Consumer, n: int, timeout: float = 20.0) -> list[Message]:
    """Poll until ``n`` data messages arrived (errors other than partition EOF fail the test)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=n - len(got), timeout=0.5):
            err = m.error()
            if err is None:
                got.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consume error: {err}")
    assert len(got) == n, f"got {len(got)} of {n} messages within {timeout}s"
    return got


def read_partition(bootstrap: str, topic: str, partition: int, n: int, **config: Any) -> list[Message]:
    """Read ``n`` records from the start of one partition with ``assign`` (no group protocol)."""
    c = consumer(bootstrap, **config)
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        return consume_n(c, n)
    finally:
        c.close()


