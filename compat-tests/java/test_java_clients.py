"""Java's kafka-clients (3.9 and 4.x) against the broker, through tools/java/GreteJavaClient.java."""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as librdkafka reads them (an independent view)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([req])[group].result(timeout=20)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_then_group_consume(java_client, broker, make_topic, codec):
    topic = make_topic(partitions=3)
    n = 30
    acks = java_client.ok("produce", topic, str(n), f"compression.type={codec}", "acks=all",
                          "enable.idempotence=true")
    assert len(acks) == n
    by_partition: dict[int, list[int]] = defaultdict(list)
    for a in acks:
        by_partition[int(a["partition"])].append(int(a["offset"]))
    # Each key goes to one partition; offsets there are dense from 0 in send order.
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))

    group = f"java-{uuid.uuid4().hex[:8]}"
    records = java_client.ok("consume", topic, group, str(n))
    assert sorted(r["value"] for r in records) == sorted(f"v{i}-{topic}" for i in range(n))
    for r in records:
        i = int(r["headers"]["i"])
        assert r["key"] == f"k{i % 4}" and r["value"] == f"v{i}-{topic}"
    got = defaultdict(list)
    for r in records:
        got[int(r["partition"])].append(int(r["offset"]))
    assert {p: sorted(o) for p, o in got.items()} == dict(by_partition)
    # The harness commits its positions: the log end of every assigned partition (0 where no key landed).
    assert committed(broker.bootstrap, group, topic, 3) == {p: len(by_partition.get(p, [])) for p in range(3)}


def test_transactions_commit_and_abort(java_client, make_topic):
    topic = make_topic(partitions=1)
    # max.block.ms bounds initTransactions when there is no transaction coordinator (default 60 s).
    steps = java_client.ok("txn", topic, f"txn-{uuid.uuid4().hex[:8]}", "c3,a2,c4", "max.block.ms=20000")
    assert [s["step"] for s in steps] == ["c3", "a2", "c4"]

    committed_values = [f"v{i}-{topic}" for i in (0, 1, 2, 5, 6, 7, 8)]
    seen = java_client.ok("consume", topic, f"rc-{uuid.uuid4().hex[:8]}", "7", "isolation.level=read_committed")
    assert [r["value"] for r in seen] == committed_values

    everything = java_client.ok("consume", topic, f"ru-{uuid.uuid4().hex[:8]}", "9",
                                "isolation.level=read_uncommitted")
    assert [r["value"] for r in everything] == [f"v{i}-{topic}" for i in range(9)]
    # Offsets skip the transaction markers: 3 records + marker, 2 + marker, 4 (+ marker after).
    assert [r["offset"] for r in everything] == [0, 1, 2, 4, 5, 7, 8, 9, 10]


def test_admin_create_and_describe(java_client, broker):
    topic = f"java-admin-{uuid.uuid4().hex[:8]}"
    cluster, desc, listed = java_client.ok("admin", topic, "4")
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert sorted(cluster["nodes"]) == sorted(md.brokers)
    assert cluster["cluster_id"]
    # With KRaft the "controller" a client sees is one of the brokers.
    assert cluster["controller"] in cluster["nodes"]
    assert desc == {"topic": topic, "partitions": 4, "leaders": desc["leaders"]}
    assert len(desc["leaders"]) == 4 and all(leader in md.brokers for leader in desc["leaders"])
    assert listed == {"listed": True}
    assert len(md.topics[topic].partitions) == 4


def test_java_reads_what_librdkafka_wrote(java_client, make_topic, produce):
    topic = make_topic(partitions=1)
    sent = [(f"k{i}".encode(), f"from-librdkafka-{i}".encode()) for i in range(12)]
    produce(topic, sent, **{"compression.type": "zstd"})
    records = java_client.ok("consume", topic, f"x-{uuid.uuid4().hex[:8]}", "12")
    assert [(r["key"], r["value"]) for r in records] == [(k.decode(), v.decode()) for k, v in sent]
    assert [r["offset"] for r in records] == list(range(12))
