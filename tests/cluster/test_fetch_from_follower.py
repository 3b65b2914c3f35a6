"""Fetch from follower (KIP-392) in a grete cluster with racks: a leader tells a consumer in another
rack to read from the in-sync follower of its rack; the follower serves Fetch v11+ up to its own
high watermark and refuses older fetches as Kafka does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch
from grete.testing import _wire
from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    overrides = {**CLUSTER_OVERRIDES,
                 "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
    with cluster(3, overrides=overrides,
                 broker_overrides={b: {"broker.rack": r} for b, r in RACKS.items()}) as running:
        yield running


def fetch(cluster: GreteCluster, broker: int, topic: str, version: int, rack: str = "") -> FetchResponse.PartitionData:
    process = cluster.brokers[broker]
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           rack_id=rack, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    response = _wire.call(process.host, process.port, request, FetchResponse, version)
    return response.responses[0].partitions[0]


def test_reading_from_the_follower_in_the_clients_rack(grete_cluster: GreteCluster, zk: KazooClient,
                                                       topic_name: str) -> None:
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    client.create_topics([NewTopic(topic_name, 1, replica_assignment=[[1, 2, 3]])])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all"})
    for i in range(100):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    assert json.loads(zk.get(f"/brokers/topics/{topic_name}/partitions/0/state")[0])["leader"] == 1
    # The leader (rack-a) points a rack-c client at broker 3; a rack-a client reads from it.
    wait_until(lambda: fetch(grete_cluster, 1, topic_name, 11, "rack-c").preferred_read_replica == 3, 10,
               "the leader naming broker 3")
    assert fetch(grete_cluster, 1, topic_name, 11, "rack-a").preferred_read_replica == -1
    assert fetch(grete_cluster, 1, topic_name, 11, "").preferred_read_replica == -1
    # The follower serves v11+ up to its own high watermark, and refuses older fetches.
    wait_until(lambda: fetch(grete_cluster, 3, topic_name, 11).high_watermark == 100, 10, "the follower's HW")
    served = fetch(grete_cluster, 3, topic_name, 11)
    assert served.error_code == 0 and served.records
    assert fetch(grete_cluster, 3, topic_name, 10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A stock consumer with client.rack follows the hint and reads everything.
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": "unused",
                         "client.rack": "rack-c", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 100 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(100)]


def test_refusals_name_the_leader_and_its_endpoint(grete_cluster: GreteCluster, topic_name: str) -> None:
    """KIP-951: Produce v10+ sent to a follower and Fetch v16+ sent to a broker without the
    partition answer NOT_LEADER_OR_FOLLOWER with the leader's id, epoch and endpoint (rack too)."""
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    client.create_topics([NewTopic(topic_name, 1, replica_assignment=[[1, 3]])])[topic_name].result(30)
    leader = grete_cluster.brokers[1]
    expected = [(1, leader.host, leader.port, "rack-a")]

    def produce_to(broker: int, version: int) -> ProduceResponse:
        process = grete_cluster.brokers[broker]
        request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic_name, partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([Record(0, 0, None, b"x")]))])])
        return _wire.call(process.host, process.port, request, ProduceResponse, version)

    wait_until(lambda: produce_to(3, 10).responses[0].partition_responses[0].current_leader.leader_id == 1, 15,
               "the follower knowing its leader")
    answer = produce_to(3, 10)
    refused = answer.responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and refused.current_leader.leader_epoch >= 0
    assert [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints] == expected
    old = produce_to(3, 9)
    assert (old.responses[0].partition_responses[0].current_leader.leader_id, old.node_endpoints) == (-1, [])
    # Broker 2 holds no replica: a consumer's fetch there is refused, with the hint from v16.
    process = grete_cluster.brokers[2]
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic_name, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    fetched = _wire.call(process.host, process.port, request, FetchResponse, 12)
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    meta = _wire.call(process.host, process.port, MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name=topic_name)]), MetadataResponse, 12)
    by_id = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic_id=meta.topics[0].topic_id, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    hinted = _wire.call(process.host, process.port, by_id, FetchResponse, 16)
    data = hinted.responses[0].partitions[0]
    assert (data.error_code, data.current_leader.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1)
    assert [(e.node_id, e.host, e.port, e.rack) for e in hinted.node_endpoints] == expected
