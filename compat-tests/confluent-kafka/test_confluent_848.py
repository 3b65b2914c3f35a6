"""librdkafka (confluent-kafka) with group.protocol=consumer (KIP-848): a group of three rebalances as
members join and leave, commits, and a later member resumes from the commits; every record is read
exactly once. Run against grete and against Kafka 4.x (3.9 has no consumer protocol).

The module runs its own broker with a 1 s heartbeat interval (Kafka's floor is 5 s), the same
overrides for grete and Kafka, so a rebalance takes seconds rather than tens of seconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_helpers import group_name, produce_all, producer
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.messages import ConsumerGroupDescribeRequest
from tools import kafka_dist
from tools.grete_target import grete_target
from tools.kafka_admin import call
from tools.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PARTITIONS = 6
FAST_HEARTBEATS = {"group.consumer.min.heartbeat.interval.ms": "1000",
                   "group.consumer.heartbeat.interval.ms": "1000"}


@pytest.fixture(scope="module")
def bootstrap(target: str) -> Iterator[str]:
    if target.startswith("grete"):
        with grete_target(target, FAST_HEARTBEATS) as servers:
            yield servers
        return
    version = target.removeprefix("kafka-")
    if kafka_dist.major(kafka_dist.resolve_version(version)) < 4:
        pytest.skip("the consumer group protocol is Kafka 4's")
    kafka_dist.fetch(version)
    with ReferenceKafka(version, overrides=FAST_HEARTBEATS) as ref:
        yield ref.bootstrap


# What a broker may answer a member's commit while its group rebalances (a commit queued behind the
# member's own JoinGroup carries the generation that join ended): the member commits again once it
# knows the new generation, at the latest when a partition is revoked.
REBALANCING = (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.STALE_MEMBER_EPOCH)


def member(bootstrap: str, group: str, topic: str, **config: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})

    def revoked(consumer: Consumer, partitions: list[Any]) -> None:
        commit(consumer)  # what was read of the partitions it gives up, before their next owner reads

    c.subscribe([topic], on_revoke=revoked)
    return c


def commit(c: Consumer) -> None:
    try:
        c.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() not in (*REBALANCING, KafkaError._NO_OFFSET):
            raise


def step(consumers: list[Consumer], seen: list[int]) -> None:
    """One poll of each member; what it read is committed before it polls again, so a partition
    that moves never hands its next owner a record already processed."""
    for c in consumers:
        batch = [m for m in c.consume(num_messages=100, timeout=0.1) if _data(m)]
        seen.extend(int(m.value()) for m in batch)
        if batch:
            commit(c)


def _data(m: Any) -> bool:
    err = m.error()
    if err is not None and err.code() != KafkaError._PARTITION_EOF:
        raise AssertionError(f"consumer error: {err}")
    return err is None


def until(condition: Any, consumers: list[Consumer], seen: list[int], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out; assignments {[len(c.assignment()) for c in consumers]}"
        step(consumers, seen)


def spread(consumers: list[Consumer]) -> bool:
    owned = [tp.partition for c in consumers for tp in c.assignment()]
    return sorted(owned) == list(range(PARTITIONS)) and all(c.assignment() for c in consumers)


def test_group_of_three_rebalances_commits_and_resumes(bootstrap: str) -> None:
    topic, group = group_name("t848"), group_name("g848")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    p = producer(bootstrap)
    produce_all(p, topic, ({"value": str(i).encode(), "partition": i % PARTITIONS} for i in range(600)))
    seen: list[int] = []
    first = member(bootstrap, group, topic)
    consumers = [first]
    until(lambda: len(first.assignment()) == PARTITIONS and seen, consumers, seen)
    consumers += [member(bootstrap, group, topic), member(bootstrap, group, topic)]
    until(lambda: spread(consumers), consumers, seen)  # three members share the six partitions
    first.close()
    consumers.remove(first)
    until(lambda: spread(consumers) and len(seen) >= 600, consumers, seen)
    assert sorted(seen) == list(range(600))  # each record once, through both rebalances
    for c in consumers:
        c.close()
    produce_all(p, topic, ({"value": str(i).encode(), "partition": i % PARTITIONS} for i in range(600, 660)))
    later: list[int] = []
    resumed = [member(bootstrap, group, topic)]
    until(lambda: len(later) >= 60, resumed, later)
    step(resumed, later)
    resumed[0].close()
    assert sorted(later) == list(range(600, 660))  # it starts at the commits, not at the beginning


def test_a_new_groups_first_member_is_at_epoch_2(bootstrap: str) -> None:
    """Kafka 4.3 starts a new group at group and assignment epoch 1 (an empty assignment), so the
    first member's join makes epoch 2 (KAFKA-20268; before 4.3 the first join made 1)."""
    topic, group = group_name("t848e"), group_name("g848e")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    c = member(bootstrap, group, topic)
    until(lambda: len(c.assignment()) == PARTITIONS, [c], [])
    described = call(bootstrap, ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
    c.close()
    assert (described.group_epoch, described.assignment_epoch, [m.member_epoch for m in described.members]) == (
        2, 2, [2])


def test_rolling_upgrade_from_classic_members_to_the_consumer_protocol(bootstrap: str) -> None:
    """Online upgrade (group.consumer.migration.policy=bidirectional, the default): two classic
    members, then a consumer-protocol member joins the same group and the classic ones leave one by
    one; partitions are shared throughout and every record is read once."""
    topic, group = group_name("t848u"), group_name("g848u")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    p = producer(bootstrap)
    produce_all(p, topic, ({"value": str(i).encode(), "partition": i % PARTITIONS} for i in range(300)))
    seen: list[int] = []
    classic = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
               "partition.assignment.strategy": "cooperative-sticky"}
    old = [member(bootstrap, group, topic, **classic), member(bootstrap, group, topic, **classic)]
    until(lambda: spread(old) and len(seen) >= 100, old, seen)
    new = member(bootstrap, group, topic)
    consumers = [*old, new]
    until(lambda: spread(consumers), consumers, seen)  # the upgraded group spans both protocols
    produce_all(p, topic, ({"value": str(i).encode(), "partition": i % PARTITIONS} for i in range(300, 600)))
    for leaving in old:
        leaving.close()
        consumers.remove(leaving)
        until(lambda: spread(consumers), consumers, seen)
    until(lambda: len(seen) >= 600, consumers, seen)
    step(consumers, seen)
    new.close()
    assert sorted(seen) == list(range(600))
