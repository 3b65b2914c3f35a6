"""Placing replicas while a KRaft cluster's broker is down, as Kafka 4's replica placer does: a
stopped broker stays registered (fenced), so a topic of replication factor 3 on three registered
brokers is created with it as a follower, out of the ISR and never the leader, and it catches up when
it is back; only more replicas than registered brokers are refused, with Kafka's message. DescribeCluster
v2 lists it, fenced, when asked to (KIP-1073). Below min.insync.replicas, acks=all is answered
NOT_ENOUGH_REPLICAS before the records are validated. (A
ZooKeeper cluster places on live brokers alone, as Kafka 3.9 does: tests/cluster/test_cluster_zookeeper.py.)
Checked against Apache Kafka 4.3.1 set up the same way."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch
from grete.testing import _wire
from tools.kraft_quorum import start_grete_broker, start_kafka_broker, start_quorum, wait_for

pytestmark = pytest.mark.slow


def _partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in meta.partitions.values()}


def _described(bootstrap: str, include_fenced: bool) -> list[tuple[int, bool]]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    answer = _wire.call(host, int(port), DescribeClusterRequest(include_fenced_brokers=include_fenced),
                        DescribeClusterResponse, 2)
    assert answer.error_code == 0, answer.error_message
    return sorted((b.broker_id, b.is_fenced) for b in answer.brokers)


def _listed(admin: AdminClient) -> set[int]:
    try:
        return set(admin.list_topics(timeout=5).brokers)
    except KafkaException:  # the bootstrap broker still starting (a busy machine): asked again
        return set()


@pytest.mark.parametrize("kind", ["grete", "kafka"])
def test_a_stopped_broker_still_takes_followers(kind: str, tmp_path: Path, started: list[Any]) -> None:
    quorum = start_quorum([kind], tmp_path / "quorum")
    started.append(quorum)
    start = start_grete_broker if kind == "grete" else start_kafka_broker
    brokers = {node_id: start(quorum, node_id, tmp_path / f"broker{node_id}") for node_id in (10, 11, 12)}
    started.extend(brokers.values())
    admin = AdminClient({"bootstrap.servers": brokers[10].bootstrap})
    wait_for(lambda: _listed(admin) == {10, 11, 12}, 120, "every broker listed")

    stopped = brokers[12]
    assert stopped.process is not None
    stopped.process.send_signal(signal.SIGTERM)  # a clean stop: it stays registered, fenced
    stopped.process.wait(90)
    stopped.process = None
    wait_for(lambda: _listed(admin) == {10, 11}, 60, "the stopped broker unlisted")
    # DescribeCluster v2 (KIP-1073, kafka-cluster list-endpoints --include-fenced-brokers) lists it fenced.
    assert _described(brokers[10].bootstrap, include_fenced=True) == [(10, False), (11, False), (12, True)]
    assert _described(brokers[10].bootstrap, include_fenced=False) == [(10, False), (11, False)]

    admin.create_topics([NewTopic("t", 3, 3)])["t"].result(60)
    admin.create_partitions([NewPartitions("t", 5)])["t"].result(60)
    partitions = wait_for(lambda: found if len(found := _partitions(admin, "t")) == 5 else None, 30,
                          "five partitions listed")
    for leader, replicas, isr in partitions.values():
        assert sorted(replicas) == [10, 11, 12]
        assert sorted(isr) == [10, 11] and leader in (10, 11)

    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("too-many", 1, 4)])["too-many"].result(60)
    error = refused.value.args[0]
    assert error.name() == "INVALID_REPLICATION_FACTOR"
    assert "The target replication factor of 4 cannot be reached because only 3 broker(s) are registered" in error.str()

    # Below min.insync.replicas, a batch that would be refused anyway (no key, compacted topic) is
    # answered the retriable NOT_ENOUGH_REPLICAS: Kafka checks the ISR before the records.
    admin.create_topics([NewTopic("strict", 1, 3, config={"cleanup.policy": "compact",
                                                          "min.insync.replicas": "3"})])["strict"].result(60)
    strict = wait_for(lambda: found if (found := _partitions(admin, "strict")) and found[0][0] >= 0 else None, 30,
                      "the strict topic led")
    leader = brokers[strict[0][0]]
    host, port = leader.bootstrap.split(",")[0].rsplit(":", 1)
    keyless = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="strict", partition_data=[ProduceRequest.PartitionProduceData(
            index=0, records=build_batch([Record(0, 0, None, b"x")]))])])
    answer = _wire.call(host, int(port), keyless, ProduceResponse, 9).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, answer

    producer = Producer({"bootstrap.servers": brokers[10].bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("t", value=b"%d" % i, partition=i % 5)
    assert producer.flush(60) == 0

    stopped.start()
    wait_for(lambda: all(sorted(isr) == [10, 11, 12] for _l, _r, isr in _partitions(admin, "t").values()), 120,
             "the restarted broker back in every ISR")
