"""A fourth broker of the other kind joins the target's ZooKeeper: a Kafka 3.9.2 broker, or a grete
broker. It must be a full member (Metadata lists everyone) and must be able to take over as
controller once the target's own brokers stop. Each test restarts the target's brokers after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_helpers as h
import pytest
from cluster_targets import OVERRIDES, ClusterTarget

JOINER = 4


@pytest.fixture
def restore(cluster_target: ClusterTarget) -> Iterator[None]:
    yield
    for broker_id in cluster_target.broker_ids:
        if cluster_target.cluster.brokers[broker_id].process.poll() is not None:
            cluster_target.cluster.start_broker(broker_id)


def joins_and_takes_over(target: ClusterTarget, joiner: Any) -> None:
    broker = joiner.start_broker(JOINER)
    try:
        everyone = set(target.broker_ids) | {JOINER}
        h.wait_until(lambda: set(h.metadata(broker.bootstrap_servers).brokers) == everyone, 30,
                     "the joiner's Metadata listing every broker")
        h.wait_until(lambda: set(h.metadata(target.bootstrap).brokers) == everyone, 30,
                     "the target's Metadata listing the joiner")
        for broker_id in target.broker_ids:
            target.cluster.stop_broker(broker_id)
        zk = h.zk_client(target.zk_connect)
        try:
            h.wait_until(lambda: zk.exists("/controller") and h.zk_json(zk, "/controller")["brokerid"] == JOINER, 30,
                         "the joiner as controller")
            epoch = zk.get("/controller_epoch")[0]
            time.sleep(3)  # a controller that fails its failover resigns and re-elects itself at once
            assert h.zk_json(zk, "/controller")["brokerid"] == JOINER
            assert zk.get("/controller_epoch")[0] == epoch, "the controller keeps resigning"
        finally:
            zk.stop()
        md = h.metadata(broker.bootstrap_servers)
        assert (set(md.brokers), md.controller_id) == ({JOINER}, JOINER)
        name = h.unique("joined")  # the new controller creates topics
        h.create_topic(broker.bootstrap_servers, name, partitions=1, replication=1)
    finally:
        broker.stop(30)


def test_a_kafka_broker_joins_and_takes_over_as_controller(cluster_target: ClusterTarget, tmp_path: Path,
                                                           restore: None) -> None:
    from tools.reference_kafka_zk import KafkaZkCluster

    joins_and_takes_over(cluster_target, KafkaZkCluster(tmp_path, cluster_target.cluster.zookeeper, OVERRIDES))


def test_a_grete_broker_joins_and_takes_over_as_controller(cluster_target: ClusterTarget, tmp_path: Path,
                                                           restore: None) -> None:
    from grete.testing.cluster import GreteCluster

    joins_and_takes_over(cluster_target, GreteCluster(tmp_path, cluster_target.cluster.zookeeper, OVERRIDES))


def follows_the_targets_leader(target: ClusterTarget, joiner: Any) -> None:
    """The joiner follows a partition led by one of the target's brokers: it joins the ISR, holds
    every acknowledged record, and serves them all once it leads. On a grete cluster the follower
    is a Kafka 3.9.2 broker, which fetches with the Fetch version its inter-broker protocol fixes
    (v17: topic ids, ReplicaState, fetch sessions)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    broker = joiner.start_broker(JOINER)
    try:
        everyone = set(target.broker_ids) | {JOINER}
        h.wait_until(lambda: set(h.metadata(target.bootstrap).brokers) == everyone, 30,
                     "the target's Metadata listing the joiner")
        leader = target.broker_ids[0]
        name = h.unique("followed")
        client = h.admin(target.bootstrap)
        client.create_topics([NewTopic(name, 1, replica_assignment=[[leader, JOINER]])])[name].result(30)
        producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(200):
            producer.produce(name, value=f"v{i}".encode(), partition=0)
        assert producer.flush(60) == 0
        zk = h.zk_client(target.zk_connect)
        try:
            state = f"/brokers/topics/{name}/partitions/0/state"
            h.wait_until(lambda: sorted(h.zk_json(zk, state)["isr"]) == sorted([leader, JOINER]), 30,
                         "the joiner in the ISR")
            target.cluster.stop_broker(leader)
            h.wait_until(lambda: h.zk_json(zk, state)["leader"] == JOINER, 30, "the joiner leading")
        finally:
            zk.stop()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": h.unique("g"),
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 200 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(200, 0.5) if m.error() is None]
        consumer.close()
        assert values == [f"v{i}".encode() for i in range(200)]
    finally:
        broker.stop(30)


def test_the_other_kind_of_broker_follows_a_leader(cluster_target: ClusterTarget, tmp_path: Path,
                                                  restore: None) -> None:
    if cluster_target.is_grete:
        from tools.reference_kafka_zk import KafkaZkCluster

        joiner: Any = KafkaZkCluster(tmp_path, cluster_target.cluster.zookeeper, OVERRIDES)
    else:
        from grete.testing.cluster import GreteCluster

        joiner = GreteCluster(tmp_path, cluster_target.cluster.zookeeper, OVERRIDES)
    follows_the_targets_leader(cluster_target, joiner)
