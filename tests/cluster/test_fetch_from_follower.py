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
from grete.protocol.messages import FetchRequest, FetchResponse
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
