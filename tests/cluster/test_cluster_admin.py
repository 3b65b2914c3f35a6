"""Dynamic broker configs and DescribeTopicPartitions in a 3-broker grete cluster on ZooKeeper:
Kafka's ``/config/brokers`` layout and change notifications, and every broker's view."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from grete.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from grete.testing import _wire
from grete.testing.cluster import GreteCluster
from tests.cluster.conftest import wait_until
from tests.cluster.test_cluster_zookeeper import admin, create

pytestmark = pytest.mark.slow
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 5
IAC = IncrementalAlterConfigsRequest


def alter(cluster: GreteCluster, via: int, name: str, ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    process = cluster.brokers[via]
    request = IAC(resources=[IAC.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    (r,) = _wire.call(process.host, process.port, request, IncrementalAlterConfigsResponse, 1).responses
    return r.error_code, r.error_message


def described(cluster: GreteCluster, broker_id: int, key: str) -> tuple[str | None, int]:
    process = cluster.brokers[broker_id]
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name=str(broker_id), configuration_keys=[key])])
    (entry,) = _wire.call(process.host, process.port, request, DescribeConfigsResponse, 4).results[0].configs
    return entry.value, entry.config_source


def test_dynamic_broker_configs_in_zookeeper(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    assert alter(grete_cluster, 1, "", [("log.retention.ms", SET, "86400123")]) == (0, None)
    assert alter(grete_cluster, 2, "2", [("sasl.kerberos.min.time.before.relogin", SET, "60123")]) == (0, None)
    try:
        assert json.loads(zk.get("/config/brokers/<default>")[0]) == {
            "version": 1, "config": {"log.retention.ms": "86400123"}}
        assert json.loads(zk.get("/config/brokers/2")[0]) == {
            "version": 1, "config": {"sasl.kerberos.min.time.before.relogin": "60123"}}
        changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "brokers/<default>"} in changes
        assert {"version": 2, "entity_path": "brokers/2"} in changes
        # Each broker learns the cluster default from ZooKeeper; only broker 2 has its own key.
        wait_until(lambda: all(described(grete_cluster, b, "log.retention.ms") == (
            "86400123", DYNAMIC_DEFAULT_BROKER_CONFIG) for b in (1, 2, 3)), what="the default on every broker")
        assert described(grete_cluster, 2, "sasl.kerberos.min.time.before.relogin") == ("60123", DYNAMIC_BROKER_CONFIG)
        assert described(grete_cluster, 3, "sasl.kerberos.min.time.before.relogin")[1] != DYNAMIC_BROKER_CONFIG
        # No ELR under ZooKeeper (as Kafka 3.9.2): min.insync.replicas may be set per broker.
        assert alter(grete_cluster, 3, "3", [("min.insync.replicas", SET, "1")]) == (0, None)
        assert alter(grete_cluster, 3, "3", [("min.insync.replicas", DELETE, None)]) == (0, None)
    finally:
        alter(grete_cluster, 1, "", [("log.retention.ms", DELETE, None)])
        alter(grete_cluster, 2, "2", [("sasl.kerberos.min.time.before.relogin", DELETE, None)])


def test_describe_topic_partitions_in_a_cluster(grete_cluster: GreteCluster, topic_name: str) -> None:
    create(grete_cluster, topic_name, 3, 3)
    DTP = DescribeTopicPartitionsRequest

    def page(via: int) -> DescribeTopicPartitionsResponse:
        process = grete_cluster.brokers[via]
        return _wire.call(process.host, process.port, DTP(topics=[DTP.TopicRequest(name=topic_name)],
                                                          response_partition_limit=2),
                          DescribeTopicPartitionsResponse, 0)
    wait_until(lambda: all(len(page(b).topics[0].partitions) == 2 for b in (1, 2, 3)), what="the topic everywhere")
    answer = page(3)
    (topic,) = answer.topics
    assert [p.partition_index for p in topic.partitions] == [0, 1]
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == (topic_name, 2)
    for p in topic.partitions:
        assert p.error_code == 0 and sorted(p.replica_nodes) == [1, 2, 3] and p.leader_id in p.replica_nodes
        assert sorted(p.isr_nodes) == [1, 2, 3]


def test_every_broker_knows_a_topics_overrides(grete_cluster: GreteCluster, topic_name: str) -> None:
    """A broker that hosts no replica of a topic gets no LeaderAndIsr for it, yet answers its
    DescribeConfigs (and the min-ISR listings built on it) with its overrides, as Kafka 3.9's."""
    client = admin(grete_cluster)
    futures = client.create_topics([NewTopic(topic_name, 1, replica_assignment=[[1]],
                                             config={"min.insync.replicas": "5", "retention.ms": "7200000"})])
    futures[topic_name].result(30)

    def overrides(broker_id: int) -> dict[str, str | None]:
        process = grete_cluster.brokers[broker_id]
        request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=TOPIC, resource_name=topic_name, configuration_keys=None)])
        (result,) = _wire.call(process.host, process.port, request, DescribeConfigsResponse, 4).results
        return {c.name: c.value for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG}
    wanted = {"min.insync.replicas": "5", "retention.ms": "7200000"}
    wait_until(lambda: all(overrides(b) == wanted for b in (1, 2, 3)), what="the overrides on every broker")


def test_kafka_3_9_defaults_where_kafka_4_changed_them(grete_cluster: GreteCluster, topic_name: str) -> None:
    """A ZooKeeper cluster's broker runs with Kafka 3.9's defaults: no bound on timestamps in the
    future (Kafka 4 has 1 h) and no KRaft process.roles."""
    create(grete_cluster, topic_name, 1, 3)
    process = grete_cluster.brokers[1]
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=topic_name, configuration_keys=["message.timestamp.after.max.ms"])])
    (entry,) = _wire.call(process.host, process.port, request, DescribeConfigsResponse, 4).results[0].configs
    assert (entry.value, entry.config_source) == (str(2**63 - 1), DEFAULT_CONFIG)
    assert described(grete_cluster, 2, "process.roles") == ("", DEFAULT_CONFIG)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers})
    errors: list[object] = []
    producer.produce(topic_name, b"later", timestamp=int(time.time() * 1000) + 2 * 3600 * 1000,
                     on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]


def test_a_manual_assignment_may_name_an_unknown_broker(grete_cluster: GreteCluster, topic_name: str) -> None:
    """Kafka 3.9's ZooKeeper-mode CreateTopics takes replicas on a broker it does not know (the
    partition is then under-replicated); a KRaft cluster refuses them."""
    client = admin(grete_cluster)
    client.create_topics([NewTopic(topic_name, 1, replica_assignment=[[1, 9]])])[topic_name].result(30)
    wait_until(lambda: (meta := client.list_topics(topic_name, timeout=10).topics[topic_name]).error is None
               and meta.partitions[0].leader == 1, what="broker 1 leading")
    partition = client.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0]
    assert (partition.replicas, partition.isrs) == ([1, 9], [1])
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
    producer.produce(topic_name, b"kept")
    assert producer.flush(30) == 0


def test_a_restarted_broker_runs_with_the_dynamic_configs(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """A broker reads /config/brokers/<default> and /config/brokers/<id> when it starts and runs with
    them (it was built before they were read, and kept its static configs until the next change); a
    value it cannot parse (another writer's) is logged and left out, the broker starts."""
    assert alter(grete_cluster, 1, "", [("message.max.bytes", SET, "2000123")]) == (0, None)
    assert alter(grete_cluster, 3, "3", [("log.cleaner.threads", SET, "2")]) == (0, None)
    own = json.loads(zk.get("/config/brokers/3")[0])
    zk.set("/config/brokers/3", json.dumps({**own, "config": {**own["config"], "log.cleaner.backoff.ms": "soon"}}).encode())
    try:
        assert grete_cluster.stop_broker(3) == 0
        grete_cluster.start_broker(3)
        assert described(grete_cluster, 3, "message.max.bytes") == ("2000123", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert described(grete_cluster, 3, "log.cleaner.threads") == ("2", DYNAMIC_BROKER_CONFIG)
        assert described(grete_cluster, 3, "log.cleaner.backoff.ms") == ("15000", DEFAULT_CONFIG)
        assert "log.cleaner.backoff.ms='soon' is left out" in grete_cluster.brokers[3].log_path.read_text()
    finally:
        zk.set("/config/brokers/3", json.dumps(own).encode())
        alter(grete_cluster, 1, "", [("message.max.bytes", DELETE, None)])
        alter(grete_cluster, 3, "3", [("log.cleaner.threads", DELETE, None)])
