"""Share groups (KIP-932) with Java's KafkaShareConsumer (kafka-clients 4.3.1): two share consumers on
one partition, explicit acknowledgement. Each record is held by one consumer at a time, the released
record comes back with delivery count 2, the rejected one never again, every other record is
accepted once. One JVM; against grete and Kafka 4.x (3.9 has no share groups)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tools import kafka_dist

CLIENT = "4"
COUNT = 12


def test_java_share_consumers(broker, make_topic, target):
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")
    try:
        kafka_dist.harness_classes(CLIENT)
    except Exception as exc:
        pytest.skip(f"Java harness for kafka-clients {CLIENT} unavailable: {exc}")
    topic = make_topic(partitions=1)
    group = f"jshare-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(COUNT):
        producer.produce(topic, f"v{i}".encode(), partition=0)
        producer.flush(30)  # one batch per record: the consumers can split them
    done = subprocess.run(kafka_dist.harness_cmd(CLIENT, "share", broker.bootstrap, topic, group, str(COUNT)),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    deliveries = Counter((x["value"], x["delivery"]) for x in lines)
    assert all(n == 1 for n in deliveries.values()), f"a delivery seen twice: {deliveries}"
    accepted = Counter(x["value"] for x in lines if x["ack"] == "ACCEPT")
    assert accepted == Counter(f"v{i}" for i in range(COUNT) if i != 1)
    assert [(x["delivery"], x["ack"]) for x in lines if x["value"] == "v0"] == [(1, "RELEASE"), (2, "ACCEPT")]
    assert [(x["delivery"], x["ack"]) for x in lines if x["value"] == "v1"] == [(1, "REJECT")]
