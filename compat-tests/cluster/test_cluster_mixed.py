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
