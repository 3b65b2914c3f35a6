"""Kafka 4's future-timestamp bound (KIP-1030: ``log.message.timestamp.after.max.ms`` defaults to one
hour): a record stamped two hours ahead is refused with INVALID_TIMESTAMP, one stamped half an hour
ahead is stored, and a topic may lift the bound. confluent-kafka against Kafka 4.3.1 and grete
(Kafka 3.9's default is unbounded, so its target skips)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4's default (3.9 accepts any future timestamp)")
HOUR_MS = 3_600_000


def produce_at(bootstrap: str, topic: str, timestamp_ms: int) -> int:
    """The delivery report's error code (0 when stored)."""
    outcome: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0, "message.timeout.ms": 20000})
    producer.produce(topic, b"v", timestamp=timestamp_ms,
                     on_delivery=lambda err, _msg: outcome.append(0 if err is None else err.code()))
    producer.flush(30)
    return outcome[0]


def test_future_timestamps(broker, make_topic):
    now = int(time.time() * 1000)
    topic = make_topic()
    assert produce_at(broker.bootstrap, topic, now + 2 * HOUR_MS) == KafkaError.INVALID_TIMESTAMP
    assert produce_at(broker.bootstrap, topic, now + HOUR_MS // 2) == 0
    unbounded = make_topic(config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    assert produce_at(broker.bootstrap, unbounded, now + 2 * HOUR_MS) == 0
