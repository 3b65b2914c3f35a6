"""The multi-broker scenario for the Go and JavaScript clients: a 3-broker cluster, a
topic with RF 3, a client producing while one broker (the leader of partition 0) is stopped with
SIGTERM mid-run; every record the client was told was written must be read back once. Shared by
compat-tests/sarama and compat-tests/kafkajs (test folders are not packages)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.testing.cluster import cluster, zookeeper_available
from tools.client_drivers import Driver
from tools.reference_kafka_zk import kafka_zk_cluster

SMALL_INTERNAL_TOPICS = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


@contextmanager
def three_brokers(target: str) -> Iterator[Any]:
    """A 3-broker cluster of the target: grete's, or Apache Kafka 3.9.2 in ZooKeeper mode."""
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    if target == "grete":
        with cluster(3, overrides=SMALL_INTERNAL_TOPICS) as running:
            yield running
    elif target == "kafka-3.9":
        with kafka_zk_cluster(3, overrides=SMALL_INTERNAL_TOPICS) as running:
            yield running
    else:
        pytest.skip(f"no ZooKeeper cluster of {target} (Kafka 4 has no ZooKeeper mode)")


def stop_a_leader_mid_run(running: Any, driver: Driver, topic: str, count: int,
                          **produce_options: object) -> tuple[list[str], list[str]]:
    """(values acknowledged to the producer, values read back after the broker came back).
    ``produce_options``: more options of the driver's produce command (its retry budget)."""
    client = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    client.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    zk = KazooClient(hosts=running.zookeeper.connect)
    zk.start(10)
    try:
        victim = int(json.loads(zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])["leader"])
    finally:
        zk.stop()
        zk.close()
    survivor = next(b for i, b in sorted(running.brokers.items()) if i != victim)
    produced: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            produced.extend(driver.ok(survivor.bootstrap_servers, "produce", timeout=180, topic=topic, count=count,
                                      idempotent=True, prefix="r", **produce_options))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
    writer = threading.Thread(target=produce)
    writer.start()
    # The broker is stopped once records are landing, not after a guessed delay: a stop that meets
    # the client's start (InitProducerId to a broker just going away) tests the client's start-up
    # retries, which kafkajs does not have for a refused connection, on Kafka as on grete.
    wait_until_written(survivor.bootstrap_servers, topic, 3, writer)
    assert running.stop_broker(victim) == 0
    writer.join(200)
    running.start_broker(victim)
    if errors:
        raise errors[0]
    if any(line.get("error_code") for line in produced):
        raise AssertionError(f"the producer failed: {[line for line in produced if line.get('error_code')][:3]}")
    acked = [str(line["value"]) for line in produced if line.get("value") is not None]
    if not acked and produced:  # a driver that reports batches, not records (kafkajs): all were written
        acked = [f"r{i}" for i in range(count)]
    return acked, read_back(running.bootstrap_servers, topic, 3, len(acked))


def wait_until_written(bootstrap: str, topic: str, partitions: int, writer: threading.Thread,
                       timeout: float = 60.0) -> None:
    """Until some partition of the topic has a record (or the writer has ended: its outcome is
    reported by the caller)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while writer.is_alive() and time.monotonic() < deadline:
            if any(_high_watermark(consumer, TopicPartition(topic, p)) > 0 for p in range(partitions)):
                return
            time.sleep(0.05)  # a test watching a broker from outside; nothing to park on
    finally:
        consumer.close()


def _high_watermark(consumer: Consumer, partition: TopicPartition) -> int:
    """0 while the partition is not yet in the client's metadata (the new topic is still reaching
    the broker it asked)."""
    try:
        return int(consumer.get_watermark_offsets(partition, 5.0, cached=False)[1])
    except KafkaException:
        return 0


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0) -> list[str]:
    """Every record from the start of every partition, read by confluent-kafka without a group:
    the judge is a client other than the one under test."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            values += [m.value().decode() for m in consumer.consume(1000, 0.5) if m.error() is None]
        values += [m.value().decode() for m in consumer.consume(1000, 1.0) if m.error() is None]  # duplicates
    finally:
        consumer.close()
    return values
