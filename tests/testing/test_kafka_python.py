"""kafka-python's retry, timeout, reconnect and rebalance logic against injected faults."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from grete.protocol.errors import ErrorCode
from grete.testing import RunningBroker


@pytest.fixture
def producer(grete_broker: RunningBroker) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=grete_broker.bootstrap_servers, acks="all", enable_idempotence=True,
                      retries=10, retry_backoff_ms=20, request_timeout_ms=5000, linger_ms=0)
    yield p
    p.close(timeout=5)


def _values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=1500, enable_auto_commit=False)
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) > expected:  # one more than expected proves a duplicate; stop there
                break
        return values
    finally:
        consumer.close()


def test_retriable_errors_are_retried_without_duplicates(grete_broker: RunningBroker, grete_topic: str,
                                                         producer: KafkaProducer) -> None:
    with grete_broker.faults.fail("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, times=3) as fault:
        futures = [producer.send(grete_topic, f"v{i}".encode()) for i in range(5)]
        offsets = [f.get(timeout=15).offset for f in futures]
        assert fault.hits == 3
    assert offsets == [0, 1, 2, 3, 4]
    assert _values(grete_broker.bootstrap_servers, grete_topic, 5) == [f"v{i}".encode() for i in range(5)]


def test_a_timed_out_append_is_retried_and_deduplicated(grete_broker: RunningBroker, grete_topic: str) -> None:
    """The broker appends, the client times out first and retries: idempotence must drop the copy."""
    producer = KafkaProducer(bootstrap_servers=grete_broker.bootstrap_servers, acks="all",
                             enable_idempotence=True, retries=5, retry_backoff_ms=20, request_timeout_ms=500,
                             linger_ms=0)
    try:
        with grete_broker.faults.delay("Produce", 0.8, times=1):
            offset = producer.send(grete_topic, b"once").get(timeout=15).offset
    finally:
        producer.close(timeout=5)
    assert offset == 0
    assert _values(grete_broker.bootstrap_servers, grete_topic, 1) == [b"once"]


def test_non_retriable_error_surfaces(grete_broker: RunningBroker, grete_topic: str,
                                      producer: KafkaProducer) -> None:
    with grete_broker.faults.fail("Produce", ErrorCode.TOPIC_AUTHORIZATION_FAILED) as fault:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(grete_topic, b"denied").get(timeout=10)
        assert fault.hits == 1  # not retried


def test_delay_makes_the_client_time_out(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=grete_broker.bootstrap_servers, retries=0,
                             request_timeout_ms=400, linger_ms=0)
    try:
        producer.partitions_for(grete_topic)
        with grete_broker.faults.delay("Produce", 3.0):
            started = time.monotonic()
            with pytest.raises(KafkaError):
                producer.send(grete_topic, b"slow").get(timeout=10)
            assert time.monotonic() - started < 2.5
    finally:
        producer.close(timeout=1)


def test_dropped_connections_are_reestablished(grete_broker: RunningBroker, grete_topic: str,
                                               producer: KafkaProducer) -> None:
    assert producer.send(grete_topic, b"before").get(timeout=10).offset == 0
    assert grete_broker.faults.drop_connections() >= 1
    assert producer.send(grete_topic, b"after").get(timeout=10).offset == 1


def test_paused_partition_holds_produce_until_resume(grete_broker: RunningBroker, grete_topic: str,
                                                     producer: KafkaProducer) -> None:
    producer.partitions_for(grete_topic)
    with grete_broker.faults.pause_partition(grete_topic, 0) as paused:
        future = producer.send(grete_topic, b"held")
        paused.wait_held(1)
        time.sleep(0.2)
        assert not future.is_done
    assert future.get(timeout=10).offset == 0


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned = 0

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned += 1


def test_expired_member_rejoins_after_a_rebalance(grete_broker: RunningBroker, grete_topic: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=grete_broker.bootstrap_servers, group_id="expiring",
                             heartbeat_interval_ms=100, session_timeout_ms=6000, enable_auto_commit=False)
    listener = _Assignments()
    consumer.subscribe([grete_topic], listener=listener)
    # Metadata before the first join: kafka-python 3.0.12 can drop the answer to a leader's
    # metadata-triggered rejoin after a poll timeout (compat-tests/kafka-python/FINDINGS.md).
    consumer.partitions_for_topic(grete_topic)
    try:
        _poll_until(consumer, lambda: listener.assigned == 1)
        [member] = grete_broker.group_members("expiring")
        grete_broker.faults.expire_member("expiring", member)
        assert grete_broker.group_members("expiring") == []
        _poll_until(consumer, lambda: listener.assigned == 2)
        [rejoined] = grete_broker.group_members("expiring")
        assert rejoined != member
        assert grete_broker.group_state("expiring") == "Stable"
    finally:
        consumer.close()


def _poll_until(consumer: KafkaConsumer, condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        consumer.poll(timeout_ms=50)
