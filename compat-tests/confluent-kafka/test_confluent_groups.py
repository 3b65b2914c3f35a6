"""confluent-kafka consumer groups: rebalancing, static membership, committed offsets."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_helpers import consume_n, consumer, group_name, produce_all, producer, wait_until
from confluent_kafka import Consumer, KafkaError, TopicPartition

pytestmark = pytest.mark.compat

PARTITIONS = 6


class Member:
    """One subscribed consumer that records its assignment and every message it sees."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        self.assigned: set[int] = set()
        self.revokes = 0
        self.seen: list[tuple[int, int]] = []  # (partition, offset)
        self.consumer: Consumer = consumer(bootstrap, group, **{"session.timeout.ms": 10_000,
                                                                "heartbeat.interval.ms": 500, **config})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = {tp.partition for tp in parts}

    def _on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.revokes += 1
        self.assigned = set()

    def poll(self) -> None:
        m = self.consumer.poll(0.1)
        if m is None:
            return
        if m.error() is None:
            self.seen.append((m.partition(), m.offset()))
        elif m.error().code() != KafkaError._PARTITION_EOF:
            raise AssertionError(f"consumer error: {m.error()}")

    def close(self) -> None:
        self.consumer.close()


def poll_all(members: list[Member]) -> Callable[[], None]:
    def step() -> None:
        for m in members:
            m.poll()
    return step


def balanced(members: list[Member]) -> bool:
    """Every partition owned by exactly one member, and every member owns at least one."""
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assigned for m in members)


@pytest.mark.slow
def test_group_of_three_rebalances_on_join_and_leave(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = group_name()
    members: list[Member] = []
    try:
        for _ in range(3):  # join one at a time: every join rebalances
            members.append(Member(broker.bootstrap, group, topic))
            wait_until(lambda: balanced(members), 45, poll_all(members), f"{len(members)} balanced")
        produce_all(producer(broker.bootstrap), topic,
                    [{"value": str(i).encode(), "partition": i % PARTITIONS} for i in range(60)])
        wait_until(lambda: sum(len(m.seen) for m in members) >= 60, 30, poll_all(members), "60 seen")
        seen = [s for m in members for s in m.seen]
        assert sorted(seen) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(60))
        for m in members:  # each member only saw its own partitions
            assert {p for p, _ in m.seen} <= m.assigned
        for m in members:
            m.consumer.commit(asynchronous=False)
        # One leaves: the other two split all six partitions and pick up new records.
        leaver = members.pop()
        leaver.close()
        wait_until(lambda: balanced(members), 45, poll_all(members), "2 balanced after leave")
        before = {m: len(m.seen) for m in members}
        produce_all(producer(broker.bootstrap), topic,
                    [{"value": b"after", "partition": p} for p in range(PARTITIONS)])
        wait_until(lambda: sum(len(m.seen) - before[m] for m in members) >= PARTITIONS, 30,
                   poll_all(members), "records after leave")
        new = [s for m in members for s in m.seen[before[m]:]]
        assert sorted(new) == [(p, 10) for p in range(PARTITIONS)], "re-delivered or missing after leave"
    finally:
        for m in members:
            m.close()


@pytest.mark.slow
def test_static_member_rejoins_without_rebalance(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = group_name()
    static = {"session.timeout.ms": 30_000}
    a = Member(broker.bootstrap, group, topic, **{"group.instance.id": "a", **static})
    b = Member(broker.bootstrap, group, topic, **{"group.instance.id": "b", **static})
    members = [a, b]
    try:
        wait_until(lambda: balanced(members), 45, poll_all(members), "static group balanced")
        first_a, first_b, b_revokes = set(a.assigned), set(b.assigned), b.revokes
        a.close()  # a static member's close does not leave the group
        time.sleep(1.0)
        a2 = Member(broker.bootstrap, group, topic, **{"group.instance.id": "a", **static})
        members = [a2, b]
        wait_until(lambda: bool(a2.assigned), 30, poll_all(members), "restarted member assigned")
        for _ in range(20):  # give a (wrong) rebalance the chance to show up at b
            poll_all(members)()
        assert a2.assigned == first_a
        assert b.assigned == first_b
        assert b.revokes == b_revokes, "the other member was rebalanced"
    finally:
        for m in members:
            m.close()


def test_commit_then_committed_and_resume(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    produce_all(producer(broker.bootstrap), topic, [{"value": f"r{i}".encode()} for i in range(20)])
    group = group_name()
    c = consumer(broker.bootstrap, group)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        consume_n(c, 12)
        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 12
    finally:
        c.close()
    # A new consumer of the same group starts at the committed offset, not at auto.offset.reset.
    c2 = consumer(broker.bootstrap, group)
    try:
        c2.assign([TopicPartition(topic, 0)])  # OFFSET_INVALID: use the committed offset
        got = consume_n(c2, 8)
        assert [m.value() for m in got] == [f"r{i}".encode() for i in range(12, 20)]
        (tp,) = c2.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 12  # auto commit is off
    finally:
        c2.close()
    # A group that never committed has no offset.
    c3 = consumer(broker.bootstrap)
    try:
        (tp,) = c3.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset < 0
    finally:
        c3.close()


def test_commit_with_metadata_via_subscribe(broker, make_topic: Callable[..., str]) -> None:
    """Subscribe (group protocol) and commit the consumed position: the commit carries metadata."""
    topic = make_topic()
    produce_all(producer(broker.bootstrap), topic, [{"value": b"x"} for _ in range(5)])
    group = group_name()
    c = consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        consume_n(c, 5, timeout=30)
        c.commit(offsets=[TopicPartition(topic, 0, 5, metadata="checkpoint-1")], asynchronous=False)
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert (tp.offset, tp.metadata) == (5, "checkpoint-1")
    finally:
        c.close()
