"""kafka-topics against the broker: create, list, describe, add partitions, and the duplicate error."""

from __future__ import annotations

import re
import uuid

from confluent_kafka.admin import AdminClient

PARTITION_LINE = re.compile(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)\s+Replicas:\s*([\d,]+)\s+Isr:\s*([\d,]*)")


def describe_partitions(out: str, topic: str) -> dict[int, int]:
    """partition -> leader, from kafka-topics --describe output lines of this topic."""
    found: dict[int, int] = {}
    for line in out.splitlines():
        if f"Topic: {topic}" not in line:
            continue
        m = PARTITION_LINE.search(line)
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def partitions_seen_by_librdkafka(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=10)
    return len(md.topics[topic].partitions)


def test_create_list_describe(kafka_cli, broker):
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    out = kafka_cli.ok("kafka-topics", "--create", "--topic", topic, "--partitions", "3",
                       "--replication-factor", "1")
    assert f"Created topic {topic}." in out

    # Another client sees what the tool created.
    assert partitions_seen_by_librdkafka(broker.bootstrap, topic) == 3

    listed = kafka_cli.ok("kafka-topics", "--list").split()
    assert topic in listed

    desc = kafka_cli.ok("kafka-topics", "--describe", "--topic", topic)
    assert re.search(rf"Topic:\s*{topic}\s+TopicId:\s*\S+\s+PartitionCount:\s*3\s+ReplicationFactor:\s*1", desc), desc
    leaders = describe_partitions(desc, topic)
    assert sorted(leaders) == [0, 1, 2]
    assert all(leader >= 0 for leader in leaders.values()), desc


def test_create_duplicate_fails(kafka_cli, fresh_topic):
    done = kafka_cli.run("kafka-topics", "--create", "--topic", fresh_topic, "--partitions", "1",
                         "--replication-factor", "1")
    assert done.returncode != 0
    assert "already exists" in (done.stdout + done.stderr)


def test_add_partitions(kafka_cli, broker, fresh_topic):
    kafka_cli.ok("kafka-topics", "--alter", "--topic", fresh_topic, "--partitions", "4")
    desc = kafka_cli.ok("kafka-topics", "--describe", "--topic", fresh_topic)
    assert sorted(describe_partitions(desc, fresh_topic)) == [0, 1, 2, 3]
    assert partitions_seen_by_librdkafka(broker.bootstrap, fresh_topic) == 4


def test_describe_missing_topic_fails(kafka_cli):
    done = kafka_cli.run("kafka-topics", "--describe", "--topic", f"missing-{uuid.uuid4().hex[:8]}")
    assert done.returncode != 0
    assert "does not exist" in (done.stdout + done.stderr)


def test_delete_topic(kafka_cli, broker, fresh_topic):
    kafka_cli.ok("kafka-topics", "--delete", "--topic", fresh_topic)
    # Deletion is asynchronous in Kafka; the list converges.
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if fresh_topic not in kafka_cli.ok("kafka-topics", "--list").split():
            return
        time.sleep(0.5)
    raise AssertionError(f"{fresh_topic} still listed 30 s after --delete")
