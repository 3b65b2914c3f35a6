"""The traffic pipeline's topics on a three-broker grete cluster: created with the cluster's default
replication factor and min.insync.replicas unless options say otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from grete.testing.cluster import GreteCluster
from pipelines.traffic.topics import ensure_topics
from tests.cluster.conftest import wait_until

pytestmark = pytest.mark.slow


def replicas_and_min_insync(admin: Any, topic: str) -> tuple[set[int], str, bool]:
    """(replication factors of the topic's partitions, min.insync.replicas, whether the topic sets it).

    The broker asked may learn of a topic just created through another a moment later (metadata
    reaches brokers asynchronously, in Kafka too): ask until it lists the partitions."""
    parts = wait_until(lambda: admin.list_topics(topic, timeout=10).topics[topic].partitions.values(), 30,
                       f"{topic}'s partitions in the metadata")
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    entry = future.result(timeout=30)["min.insync.replicas"]
    return {len(p.replicas) for p in parts}, entry.value, entry.source == 1  # DYNAMIC_TOPIC_CONFIG


def test_topics_take_the_cluster_defaults_or_the_options(three_brokers: GreteCluster) -> None:
    bootstrap = three_brokers.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert ensure_topics(bootstrap, {"defaults": {}}, partitions=2) == ["defaults"]
    assert replicas_and_min_insync(admin, "defaults") == ({3}, "2", False)
    assert len(admin.list_topics("defaults", timeout=10).topics["defaults"].partitions) == 2

    made = ensure_topics(bootstrap, {"chosen": {"message.timestamp.type": "LogAppendTime"}, "defaults": {}},
                         replication_factor=2, min_insync=1)
    assert made == ["chosen"]  # an existing topic is left as it is
    assert replicas_and_min_insync(admin, "chosen") == ({2}, "1", True)
