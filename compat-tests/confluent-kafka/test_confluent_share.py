"""Share groups (KIP-932) with librdkafka's ShareConsumer (confluent-kafka 2.16): several consumers
sharing one partition each get distinct records, a released record comes back with a higher delivery
count, a rejected one never does, the delivery-count limit archives a record, a consumer that dies
holding records loses them (its connection closes), and one that holds them without acknowledging
loses them when the acquisition lock expires. Same bodies against grete and
Kafka 4.3.1 (3.9 has no share groups). Group settings are per group (ConfigResource GROUP)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Message,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from grete.coordinator.share.share_format import SNAPSHOT, ShareKey, decode_key, decode_value, partition_for
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC

pytestmark = pytest.mark.usefixtures("needs_share_groups")


@pytest.fixture
def needs_share_groups(target: str) -> None:
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def new_group(bootstrap: str, **configs: str) -> str:
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", **configs})
    return group


def produce(bootstrap: str, topic: str, values: list[str], per_batch: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        producer.produce(topic, v.encode(), partition=0)
        if (i + 1) % per_batch == 0:
            producer.flush(30)
    producer.flush(30)


@contextmanager
def share_consumer(bootstrap: str, group: str, topic: str) -> Iterator[ShareConsumer]:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    try:
        yield consumer
    finally:
        consumer.close()


def poll_until(consumer: ShareConsumer, done: Callable[[list[Message]], bool], timeout: float,
               ack: Callable[[Message], AcknowledgeType] = lambda m: AcknowledgeType.ACCEPT) -> list[Message]:
    """Poll, acknowledging each record with ``ack`` and committing, until ``done(got)`` or timeout."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(got):
        batch = [m for m in (consumer.poll(1.0) or []) if m.error() is None]
        for m in batch:
            consumer.acknowledge(m, ack(m))
        if batch:
            consumer.commit_sync(30)
        got.extend(batch)
    return got


def test_consumers_sharing_one_partition_get_each_record_once(broker, make_topic):
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap)
    values = [f"v{i}" for i in range(30)]
    produce(broker.bootstrap, topic, values, per_batch=1)
    seen: Counter[str] = Counter()
    by_consumer: list[int] = []
    with share_consumer(broker.bootstrap, group, topic) as a, share_consumer(broker.bootstrap, group, topic) as b, \
            share_consumer(broker.bootstrap, group, topic) as c:
        deadline = time.monotonic() + 60
        counts = [0, 0, 0]
        while sum(seen.values()) < len(values) and time.monotonic() < deadline:
            for i, consumer in enumerate((a, b, c)):
                got = poll_until(consumer, lambda g: True, 0.5) + poll_until(consumer, lambda g: bool(g), 1.0)
                counts[i] += len(got)
                seen.update(m.value().decode() for m in got)
        by_consumer = counts
    assert seen == Counter(values), "a record missing or delivered to two consumers"
    assert sum(by_consumer) == len(values)


def test_released_record_redelivered_rejected_never(broker, make_topic):
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [f"r{i}" for i in range(6)], per_batch=6)  # one batch, partly released

    def first_pass(m: Message) -> AcknowledgeType:
        return {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(m.offset(), AcknowledgeType.ACCEPT)

    with share_consumer(broker.bootstrap, group, topic) as consumer:
        first = poll_until(consumer, lambda g: len(g) >= 6, 30, first_pass)
        assert sorted(m.offset() for m in first) == list(range(6))
        assert {m.delivery_count() for m in first} == {1}
        again = poll_until(consumer, lambda g: False, 4)
    assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]


def test_delivery_count_limit_archives_a_record(broker, make_topic):
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap, **{"share.delivery.count.limit": "2"})
    produce(broker.bootstrap, topic, ["once"])
    with share_consumer(broker.bootstrap, group, topic) as consumer:
        got = poll_until(consumer, lambda g: False, 6, lambda m: AcknowledgeType.RELEASE)
    assert [(m.offset(), m.delivery_count()) for m in got] == [(0, 1), (0, 2)]


DIE_HOLDING = """
import os, sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    got = [m for m in (c.poll(1.0) or []) if m.error() is None]
    if got:
        print(len(got), flush=True)
        os._exit(0)  # dies holding the records: no acknowledgement, no leave
os._exit(1)
"""


@pytest.mark.slow
def test_consumer_killed_mid_lock_its_records_return(broker, make_topic):
    """Within the lock (15 s, the smallest Kafka allows): the dead consumer's connection closed."""
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap, **{"share.record.lock.duration.ms": "15000"})
    produce(broker.bootstrap, topic, [f"k{i}" for i in range(3)], per_batch=3)
    done = subprocess.run([sys.executable, "-c", DIE_HOLDING, broker.bootstrap, group, topic],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr[-2000:]
    with share_consumer(broker.bootstrap, group, topic) as consumer:
        got = poll_until(consumer, lambda g: len(g) >= 3, 40)
    assert sorted((m.offset(), m.delivery_count()) for m in got) == [(0, 2), (1, 2), (2, 2)]


def test_share_state_records_in_kafkas_format(broker, make_topic):
    """After a share consumer ran, ``__share_group_state`` holds records for the share partition on the
    partition Kafka's hash names, first a ShareSnapshot, that grete's decoder reads. (What follows
    differs: Kafka 4.3.1 writes a snapshot with start offset -1 at assignment, then a ShareUpdate at 0,
    and had not written the accepted records' new start within 30 s; grete writes a snapshot per change.)"""
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [f"s{i}" for i in range(4)], per_batch=4)
    with share_consumer(broker.bootstrap, group, topic) as consumer:
        assert len(poll_until(consumer, lambda g: len(g) >= 4, 30)) == 4
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic_id = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    key = ShareKey(group, uuid.UUID(bytes=topic_id.get_most_significant_bits().to_bytes(8, "big", signed=True)
                                    + topic_id.get_least_significant_bits().to_bytes(8, "big", signed=True)), 0)
    state_topic = admin.list_topics(timeout=30).topics[SHARE_GROUP_STATE_TOPIC]
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.assign([TopicPartition(SHARE_GROUP_STATE_TOPIC, p, 0) for p in state_topic.partitions])
    found: list[tuple[int, int, int]] = []  # (state partition, kind, start offset)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = reader.poll(1.0)
        if m is None and found:
            break  # read to the end
        if m is None or m.error() is not None or m.key() is None or m.value() is None:
            continue
        decoded = decode_key(m.key())
        if decoded is not None and decoded[1] == key:
            found.append((m.partition(), decoded[0], decode_value(decoded[0], m.value()).start_offset))
    reader.close()
    assert found and found[0][1] == SNAPSHOT, found
    assert {p for p, _, _ in found} == {partition_for(key, len(state_topic.partitions))}
    assert all(-1 <= start <= 4 for _, _, start in found), found


@pytest.mark.slow
def test_lock_expiry_makes_held_records_available(broker, make_topic):
    """A live consumer holds 3 records without acknowledging: after the 15 s lock another gets them."""
    topic = make_topic(partitions=1)
    group = new_group(broker.bootstrap, **{"share.record.lock.duration.ms": "15000"})
    produce(broker.bootstrap, topic, [f"l{i}" for i in range(3)], per_batch=3)
    with share_consumer(broker.bootstrap, group, topic) as holder, \
            share_consumer(broker.bootstrap, group, topic) as other:
        held: list[Message] = []
        deadline = time.monotonic() + 30
        while len(held) < 3 and time.monotonic() < deadline:
            held += [m for m in (holder.poll(1.0) or []) if m.error() is None]
        assert sorted(m.offset() for m in held) == [0, 1, 2]
        acquired_at = time.monotonic()
        got = poll_until(other, lambda g: len(g) >= 3, 45)
        waited = time.monotonic() - acquired_at
        for m in held:  # the holder's late acknowledgement must not disturb the close
            holder.acknowledge(m, AcknowledgeType.ACCEPT)
    assert sorted((m.offset(), m.delivery_count()) for m in got) == [(0, 2), (1, 2), (2, 2)]
    assert waited >= 12, f"redelivered after {waited:.1f} s, before the 15 s lock ended"
