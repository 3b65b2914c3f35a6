"""librdkafka (confluent-kafka) retry, timeout and rebalance logic against injected faults."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from grete.protocol.errors import ErrorCode
from grete.testing import RunningBroker


class _Deliveries:
    def __init__(self) -> None:
        self.results: list[tuple[Any, int | None]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        self.results.append((err, None if err else msg.offset()))


def _producer(b: RunningBroker, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, "retry.backoff.ms": 20,
                     "retry.backoff.max.ms": 100, **extra})


def _values(b: RunningBroker, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": f"reader-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    idle_until = time.monotonic() + 5
    try:
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
                idle_until = time.monotonic() + 1.0  # stop once nothing more arrives for 1 s
        return values
    finally:
        consumer.close()


def test_retriable_errors_are_retried_without_duplicates(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = _producer(grete_broker, **{"enable.idempotence": True})
    deliveries = _Deliveries()
    with grete_broker.faults.fail("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, times=3) as fault:
        for i in range(5):
            producer.produce(grete_topic, f"v{i}".encode(), partition=0, on_delivery=deliveries)
        assert producer.flush(15) == 0
        assert fault.hits == 3
    assert [err for err, _ in deliveries.results] == [None] * 5
    assert sorted(offset for _, offset in deliveries.results) == [0, 1, 2, 3, 4]
    assert _values(grete_broker, grete_topic) == [f"v{i}".encode() for i in range(5)]


def test_non_retriable_error_surfaces(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = _producer(grete_broker)
    deliveries = _Deliveries()
    with grete_broker.faults.fail("Produce", ErrorCode.TOPIC_AUTHORIZATION_FAILED):
        producer.produce(grete_topic, b"denied", partition=0, on_delivery=deliveries)
        producer.flush(10)
    [(err, _)] = deliveries.results
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_delay_makes_the_client_time_out(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = _producer(grete_broker, **{"message.timeout.ms": 700, "request.timeout.ms": 500})
    producer.list_topics(grete_topic, timeout=5)
    deliveries = _Deliveries()
    with grete_broker.faults.delay("Produce", 3.0):
        started = time.monotonic()
        producer.produce(grete_topic, b"slow", partition=0, on_delivery=deliveries)
        producer.flush(5)
        assert time.monotonic() - started < 2.5
    [(err, _)] = deliveries.results
    assert err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT)


def test_paused_partition_holds_produce_until_resume(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = _producer(grete_broker)
    producer.list_topics(grete_topic, timeout=5)
    deliveries = _Deliveries()
    with grete_broker.faults.pause_partition(grete_topic, 0) as paused:
        producer.produce(grete_topic, b"held", partition=0, on_delivery=deliveries)
        paused.wait_held(1)
        assert producer.flush(0.3) == 1  # still in flight
    assert producer.flush(10) == 0
    assert deliveries.results == [(None, 0)]


def test_expired_member_rejoins_after_a_rebalance(grete_broker: RunningBroker, grete_topic: str) -> None:
    assignments: list[int] = []
    consumer = Consumer({"bootstrap.servers": grete_broker.bootstrap_servers, "group.id": "expiring",
                         "heartbeat.interval.ms": 100, "session.timeout.ms": 6000})
    consumer.subscribe([grete_topic], on_assign=lambda c, parts: assignments.append(len(parts)))
    try:
        _poll_until(consumer, lambda: len(assignments) == 1)
        [member] = grete_broker.group_members("expiring")
        grete_broker.faults.expire_member("expiring", member)
        _poll_until(consumer, lambda: len(assignments) == 2)
        assert grete_broker.group_members("expiring") not in ([], [member])
    finally:
        consumer.close()


def _poll_until(consumer: Consumer, condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        consumer.poll(0.05)
