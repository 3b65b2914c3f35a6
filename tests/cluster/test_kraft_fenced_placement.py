"""Placing replicas while a KRaft cluster's broker is down, as Kafka 4's replica placer does: a
stopped broker stays registered (fenced), so a topic of replication factor 3 on three registered
brokers is created with it as a follower, out of the ISR and never the leader, and it catches up when
it is back; only more replicas than registered brokers are refused, with Kafka's message. (A
ZooKeeper cluster places on live brokers alone, as Kafka 3.9 does: tests/cluster/test_cluster_zookeeper.py.)
Checked against Apache Kafka 4.3.1 set up the same way."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tools.kraft_quorum import start_grete_broker, start_kafka_broker, start_quorum, wait_for

pytestmark = pytest.mark.slow


def _partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in meta.partitions.values()}


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

    producer = Producer({"bootstrap.servers": brokers[10].bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("t", value=b"%d" % i, partition=i % 5)
    assert producer.flush(60) == 0

    stopped.start()
    wait_for(lambda: all(sorted(isr) == [10, 11, 12] for _l, _r, isr in _partitions(admin, "t").values()), 120,
             "the restarted broker back in every ISR")
