"""Metadata, topics with three replicas and topic config changes, as clients and Kafka 3.9.2's tools
see them, on a 3-broker cluster (grete, or Apache Kafka 3.9.2 in ZooKeeper mode)."""

from __future__ import annotations

import time
from typing import Any

import cluster_helpers as h
import pytest
from cluster_targets import ClusterTarget


def test_metadata_lists_every_broker_and_the_controller(cluster_target: ClusterTarget) -> None:
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        controller = h.zk_json(zk, "/controller")["brokerid"]
        cluster_id = h.zk_json(zk, "/cluster/id")["id"]
    finally:
        zk.stop()
    expected = {i: (cluster_target.cluster.brokers[i].host, cluster_target.cluster.brokers[i].port)
                for i in cluster_target.broker_ids}
    for broker_id in cluster_target.broker_ids:  # every broker answers alike
        md = h.metadata(cluster_target.broker_bootstrap(broker_id))
        assert {i: (b.host, b.port) for i, b in md.brokers.items()} == expected
        assert md.controller_id == controller
        assert md.cluster_id == cluster_id
    described = h.describe_cluster(cluster_target.bootstrap)
    assert described.cluster_id == cluster_id
    assert described.controller.id == controller
    assert sorted(n.id for n in described.nodes) == cluster_target.broker_ids
    # The cluster id as Kafka makes it: 16 random bytes in URL-safe base64 without padding.
    assert len(cluster_id) == 22 and set(cluster_id) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_topic_with_three_replicas_described_by_admin_and_kafka_topics(cluster_target: ClusterTarget) -> None:
    name = h.unique("rf3")
    created = h.create_topic(cluster_target.bootstrap, name, partitions=3, replication=3)
    brokers = set(cluster_target.broker_ids)
    for view in created.values():
        assert set(view.replicas) == brokers and len(view.replicas) == 3
        assert view.leader == view.replicas[0]  # a new partition's leader is its first live replica
        assert set(view.isr) == brokers
    # Leaders spread: three partitions on three brokers, one each.
    assert sorted(v.leader for v in created.values()) == sorted(brokers)

    described = h.describe_topic(cluster_target.bootstrap, name)
    admin_view = {p.id: h.PartitionView(p.leader.id, tuple(r.id for r in p.replicas), tuple(r.id for r in p.isr))
                  for p in described.partitions}
    assert admin_view == created

    out = h.tool_ok("kafka-topics", "--bootstrap-server", cluster_target.bootstrap, "--describe", "--topic", name)
    parsed = h.parse_topics_describe(out)
    assert parsed["topic"]["Topic"] == name
    assert parsed["topic"]["PartitionCount"] == "3" and parsed["topic"]["ReplicationFactor"] == "3"
    tool_view = {p: h.PartitionView(int(f["Leader"]), h.int_list(f["Replicas"]), h.int_list(f["Isr"]))
                 for p, f in parsed["partitions"].items()}
    assert tool_view == created

    zk = h.zk_client(cluster_target.zk_connect)
    try:
        znode = h.zk_json(zk, f"/brokers/topics/{name}")
        states = {p: h.zk_json(zk, f"/brokers/topics/{name}/partitions/{p}/state") for p in range(3)}
    finally:
        zk.stop()
    # One topic id everywhere: ZooKeeper, AdminClient, kafka-topics.
    assert parsed["topic"]["TopicId"] == znode["topic_id"] == h.kafka_topic_id(described.topic_id)
    assert {int(p): tuple(r) for p, r in znode["partitions"].items()} == {p: v.replicas for p, v in created.items()}
    for p, state in states.items():
        assert (state["leader"], tuple(state["isr"]), state["leader_epoch"]) == (created[p].leader, created[p].isr, 0)


def test_added_partitions_continue_the_leader_rotation(cluster_target: ClusterTarget) -> None:
    """Kafka places added partitions from partition 0's first replica on (AdminZkClient.addPartitions with a
    fixed start index), so preferred leaders keep rotating through the brokers in id order."""
    name = h.unique("grow")
    created = h.create_topic(cluster_target.bootstrap, name, partitions=3, replication=3)
    h.tool_ok("kafka-topics", "--bootstrap-server", cluster_target.bootstrap, "--alter", "--topic", name,
              "--partitions", "5")
    grown = h.wait_until(lambda: (s := h.partitions_seen(cluster_target.bootstrap, name)) and len(s) == 5
                         and all(v.leader >= 0 and len(v.isr) == 3 for v in s.values()) and s,
                         what="5 partitions with leaders")
    assert {p: grown[p] for p in range(3)} == created  # the old ones untouched
    ids = cluster_target.broker_ids
    first = [grown[p].replicas[0] for p in range(5)]
    start = ids.index(first[0])
    assert first == [ids[(start + p) % len(ids)] for p in range(5)], grown
    for p in (3, 4):
        assert set(grown[p].replicas) == set(ids) and grown[p].leader == grown[p].replicas[0]


def test_kafka_configs_change_is_seen_on_every_broker(cluster_target: ClusterTarget) -> None:
    name = h.unique("cfg")
    created = h.create_topic(cluster_target.bootstrap, name, partitions=3, replication=3)
    big = b"x" * 5000
    for p in created:  # a leader on every broker accepts a 5 kB record before the change
        assert h.produce_one(cluster_target.bootstrap, name, p, big) is None
    h.tool_ok("kafka-configs", "--bootstrap-server", cluster_target.bootstrap, "--alter", "--entity-type", "topics",
              "--entity-name", name, "--add-config", "max.message.bytes=2000,retention.ms=4321000")
    described = h.tool_ok("kafka-configs", "--bootstrap-server", cluster_target.bootstrap, "--describe",
                          "--entity-type", "topics", "--entity-name", name)
    assert "max.message.bytes=2000" in described and "retention.ms=4321000" in described, described

    def everywhere() -> bool:
        for broker_id in cluster_target.broker_ids:
            broker = cluster_target.cluster.brokers[broker_id]
            configs = h.topic_configs_on(broker.host, broker.port, name)
            if (configs.get("max.message.bytes"), configs.get("retention.ms")) != ("2000", "4321000"):
                return False
        return True
    h.wait_until(everywhere, what="DescribeConfigs on every broker showing the change")

    def enforced() -> bool:  # every leader applies it: MSG_SIZE_TOO_LARGE from each
        from confluent_kafka import KafkaError

        errors = [h.produce_one(cluster_target.bootstrap, name, p, big) for p in created]
        return all(e is not None and e.code() == KafkaError.MSG_SIZE_TOO_LARGE for e in errors)
    h.wait_until(enforced, what="every leader rejecting a 5 kB record")

    zk = h.zk_client(cluster_target.zk_connect)
    try:
        stored = h.zk_json(zk, f"/config/topics/{name}")
        changes = h.config_changes(zk)
    finally:
        zk.stop()
    assert stored == {"version": 1, "config": {"max.message.bytes": "2000", "retention.ms": "4321000"}}
    assert changes[-1] == {"version": 2, "entity_path": f"topics/{name}"}


@pytest.mark.parametrize("replication", [4])
def test_replication_factor_above_the_broker_count(cluster_target: ClusterTarget, replication: int) -> None:
    done = h.tool("kafka-topics", "--bootstrap-server", cluster_target.bootstrap, "--create", "--topic",
                  h.unique("rf4"), "--partitions", "1", "--replication-factor", str(replication))
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "InvalidReplicationFactorException" in text, text
    assert "Replication factor: 4 larger than available brokers: 3." in text, text


# Kafka 3.9's topic configs that Kafka 4 removed (KIP-724, KIP-937): taken, described and, for the
# timestamp bound, enforced by a broker of a ZooKeeper cluster.
THREE_NINE_ONLY = {"message.format.version": "2.8", "message.downconversion.enable": "false",
                   "message.timestamp.difference.max.ms": "3600000"}


def _produce_at(bootstrap: str, topic: str, timestamp_ms: int) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "log_level": 0,
                         "logger": h.silent_logger()})
    outcome: list[Any] = []
    producer.produce(topic, value=b"v", partition=0, timestamp=timestamp_ms,
                     on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def test_three_nine_topic_configs(cluster_target: ClusterTarget) -> None:
    from confluent_kafka import KafkaError

    plain = h.unique("plain")
    h.create_topic(cluster_target.bootstrap, plain, partitions=1, replication=3)
    bounded = h.unique("bounded")
    h.create_topic(cluster_target.bootstrap, bounded, partitions=1, replication=3, config=THREE_NINE_ONLY)
    broker = cluster_target.cluster.brokers[cluster_target.broker_ids[0]]
    defaults = h.topic_configs_on(broker.host, broker.port, plain)
    assert {k: defaults.get(k) for k in THREE_NINE_ONLY} == {
        "message.format.version": "3.0-IV1", "message.downconversion.enable": "true",
        "message.timestamp.difference.max.ms": "9223372036854775807"}
    overridden = h.topic_configs_on(broker.host, broker.port, bounded)
    assert {k: overridden.get(k) for k in THREE_NINE_ONLY} == THREE_NINE_ONLY

    now = int(time.time() * 1000)
    two_hours = 2 * 3600 * 1000
    for stamp in (now - two_hours, now + two_hours):  # the difference bounds both sides
        error = _produce_at(cluster_target.bootstrap, bounded, stamp)
        assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP, error
        assert _produce_at(cluster_target.bootstrap, plain, stamp) is None
    assert _produce_at(cluster_target.bootstrap, bounded, now) is None

    refused = h.tool("kafka-configs", "--bootstrap-server", cluster_target.bootstrap, "--alter", "--entity-type",
                     "topics", "--entity-name", plain, "--add-config", "message.format.version=banana")
    assert refused.returncode != 0 and "InvalidConfigurationException" in refused.stdout + refused.stderr
