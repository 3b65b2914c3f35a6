"""The console in a real browser (Debian's headless Chromium) against a running single node: what it
shows matches what the Admin API answers, and its throughput chart moves while records are produced."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from grete.testing import broker
from tests.chromium import data_elements, dump_dom, need_chromium

COMMITTED = {0: 5, 1: 2, 2: 0}


def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(per_partition * partitions):
        producer.produce(topic, value=b"x" * 200, partition=i % partitions)
    assert producer.flush(10) == 0


def _commit(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    consumer.close()


def _admin_view(bootstrap: str, topic: str, group: str) -> tuple[dict[int, tuple[int, str, str]], dict[int, int]]:
    """Per partition (leader, replicas, isr) from Metadata, and the group's lag from OffsetFetch and
    ListOffsets, as kafka-consumer-groups computes it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    partitions = {p.id: (p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs)))
                  for p in meta.partitions.values()}
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-view"})
    lag = {}
    for tp in offsets.topic_partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
        lag[tp.partition] = high - tp.offset
    consumer.close()
    return partitions, lag


def test_page_matches_admin_api_and_chart_moves_while_producing() -> None:
    need_chromium()
    with broker({"console.listener": "127.0.0.1:0"}, topics={"orders": 3}) as b:
        url = f"http://127.0.0.1:{b.node.console.port}/"
        _produce(b.bootstrap_servers, "orders", 10, 3)
        _commit(b.bootstrap_servers, "billing", "orders")
        partitions, lag = _admin_view(b.bootstrap_servers, "orders", "billing")
        first = dump_dom(url)

        rows = {int(r["partition"]): (int(r["leader"]), r["replicas"], r["isr"])
                for r in data_elements(first, "partition") if r.get("topic") == "orders" and "leader" in r}
        assert rows == partitions
        topic = next(t for t in data_elements(first, "partitions") if t["topic"] == "orders")
        assert int(topic["partitions"]) == len(partitions) == 3
        shown_lag = {int(r["partition"]): int(r["lag"]) for r in data_elements(first, "lag")
                     if r["group"] == "billing"}
        assert shown_lag == lag == {0: 5, 1: 8, 2: 10}
        assert [b_["status"] for b_ in data_elements(first, "broker")] == ["up"]
        assert data_elements(first, "online")[0]["online"] == "true"
        bytes_in = _bytes_in_chart(first)
        assert bytes_in["points"] == "0"  # one sample so far: no rate yet

        # Produce for a while (the ring samples at most once a second), then look again.
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            _produce(b.bootstrap_servers, "orders", 20, 3)
        second = dump_dom(url)
        moved = _bytes_in_chart(second)
        assert int(moved["points"]) >= 1 and float(moved["last"]) > 0


def _bytes_in_chart(html: str) -> dict[str, str]:
    """The first chart's data (Bytes in /s)."""
    charts = data_elements(html, "points")
    assert len(charts) == 4 and "<title>Bytes in /s" in html
    return charts[0]
