"""A broker restarted at once after a crash: its previous ZooKeeper session still holds its
registration, so it waits for ZooKeeper to expire that session, then registers and serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.broker.child_process import spawn
from grete.testing.cluster import GreteCluster
from grete.testing.process import await_start, serve_command

pytestmark = pytest.mark.slow

RESTARTED = 3


def test_a_broker_restarted_before_its_session_expires_waits_then_registers(
        grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    path = f"/brokers/ids/{RESTARTED}"
    old_session = zk.exists(path).ephemeralOwner
    grete_cluster.kill_broker(RESTARTED)
    items = grete_cluster.broker_items(RESTARTED)
    assert items["zookeeper.session.timeout.ms"] == "6000"
    log_path = grete_cluster.directory / f"broker-{RESTARTED}.log"
    skip = log_path.stat().st_size
    # At once: start_broker would first wait for the registration to go.
    process = spawn(serve_command(items), log_path)
    assert zk.exists(path).ephemeralOwner == old_session  # the killed run's session has not expired yet
    grete_cluster.brokers[RESTARTED] = await_start(process, Path(items["log.dirs"]), log_path, 60, skip)

    text = log_path.read_text(errors="replace")[skip:]
    waited = text.index(f"broker id {RESTARTED} is still registered by ZooKeeper session 0x{old_session:x}")
    assert "zookeeper.session.timeout.ms=6000 ms" in text[waited:]
    assert waited < text.index(f"registered broker {RESTARTED} at {path}")
    assert zk.exists(path).ephemeralOwner not in (0, old_session)

    grete_cluster.await_metadata()
    admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic_name, 1, replica_assignment=[[RESTARTED]])])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "enable.idempotence": True})
    producer.produce(topic_name, value=b"led by the restarted broker")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": topic_name})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    try:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert message.value() == b"led by the restarted broker"
    finally:
        consumer.close()
