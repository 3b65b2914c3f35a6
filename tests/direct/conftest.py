from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grete.direct import Consumer, Message, Producer, TopicPartition
from grete.testing import RunningBroker, broker

# Small regions (they fill and are replaced within a test) and a short timeout for unannounced
# reservations (the dead-producer test waits for it).
DIRECT = {"direct.transports": "shm", "direct.region.bytes": "65536", "direct.produce.timeout.ms": "400"}

_names = itertools.count()


@pytest.fixture(scope="module")
def direct_broker() -> Iterator[RunningBroker]:
    with broker(DIRECT) as running:
        yield running


@pytest.fixture
def topic(direct_broker: RunningBroker) -> str:
    name = f"direct-{next(_names)}"
    direct_broker.create_topic(name, 1)
    return name


def produce(servers: str, topic: str, values: list[bytes], **conf: Any) -> list[tuple[Any, int]]:
    """Produce ``values`` to partition 0 with a direct producer; (error, offset) per record."""
    producer = Producer({"bootstrap.servers": servers, **conf})
    results: list[tuple[Any, int]] = []
    try:
        for i, value in enumerate(values):
            producer.produce(topic, value, key=b"k%d" % i, partition=0,
                             on_delivery=lambda err, msg: results.append((err, msg.offset())))
        assert producer.flush(10) == 0
    finally:
        producer.close()
    return results


def consume(servers: str, topic: str, count: int, offset: int = 0, timeout: float = 10.0,
            **conf: Any) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": servers, **conf})
    out: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                out.append(message)
    finally:
        consumer.close()
    return out
