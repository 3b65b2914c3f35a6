"""kafka-python consumer groups: rebalancing, static membership, committed offsets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from kafka_python_helpers import consumer, producer, subscribe, take, unique, wait_until

pytestmark = pytest.mark.compat

PARTITIONS = 6


class Member(ConsumerRebalanceListener):
    def __init__(self, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        self.assigned: set[int] = set()
        self.revokes = 0
        self.seen: list[tuple[int, int]] = []
        settings = {"group_id": group, "session_timeout_ms": 10_000, "heartbeat_interval_ms": 500, **config}
        self.consumer: KafkaConsumer = consumer(bootstrap, **settings)
        subscribe(self.consumer, [topic], listener=self)
        # Each member polls in its own thread, as applications do: polling several kafka-python
        # consumers round-robin from one thread made them rejoin endlessly (Kafka 3.9 and grete).
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.revokes += 1
        self.assigned = set()

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned = {tp.partition for tp in assigned}

    def _run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                self.seen.extend((r.partition, r.offset) for r in records)

    def commit(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.commit()
        self.stopping.clear()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


def poll_all(members: list[Member]) -> Callable[[], None]:
    def step() -> None:
        time.sleep(0.05)  # the members poll on their own threads
    return step


def balanced(members: list[Member]) -> bool:
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assigned for m in members)


def send_to_partitions(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    p = producer(bootstrap)
    for partition, value in values:
        p.send(topic, value=value, partition=partition)
    p.flush(30)
    p.close()


@pytest.mark.slow
def test_group_of_three_rebalances_on_join_and_leave(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = unique()
    members: list[Member] = []
    try:
        for _ in range(3):
            members.append(Member(broker.bootstrap, group, topic))
            wait_until(lambda: balanced(members), 60, poll_all(members), f"{len(members)} balanced")
        send_to_partitions(broker.bootstrap, topic, [(i % PARTITIONS, str(i).encode()) for i in range(60)])
        wait_until(lambda: sum(len(m.seen) for m in members) >= 60, 30, poll_all(members), "60 seen")
        seen = sorted(s for m in members for s in m.seen)
        assert seen == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(60))
        for m in members:
            assert {p for p, _ in m.seen} <= m.assigned
            m.commit()
        leaver = members.pop()
        leaver.close()  # sends LeaveGroup: the rest rebalance without waiting for the session timeout
        wait_until(lambda: balanced(members), 30, poll_all(members), "2 balanced after leave")
        before = {id(m): len(m.seen) for m in members}
        send_to_partitions(broker.bootstrap, topic, [(p, b"after") for p in range(PARTITIONS)])
        wait_until(lambda: sum(len(m.seen) - before[id(m)] for m in members) >= PARTITIONS, 30,
                   poll_all(members), "records after leave")
        new = sorted(s for m in members for s in m.seen[before[id(m)]:])
        assert new == [(p, 10) for p in range(PARTITIONS)]
    finally:
        for m in members:
            m.close()


@pytest.mark.slow
def test_static_member_rejoins_with_same_assignment(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = unique()
    static = {"session_timeout_ms": 30_000}
    a = Member(broker.bootstrap, group, topic, group_instance_id="a", **static)
    b = Member(broker.bootstrap, group, topic, group_instance_id="b", **static)
    members = [a, b]
    try:
        wait_until(lambda: balanced(members), 60, poll_all(members), "static group balanced")
        first_a, first_b, b_revokes = set(a.assigned), set(b.assigned), b.revokes
        a.close()  # a static member does not send LeaveGroup on close
        time.sleep(1.0)
        a2 = Member(broker.bootstrap, group, topic, group_instance_id="a", **static)
        members = [a2, b]
        wait_until(lambda: bool(a2.assigned), 30, poll_all(members), "restarted member assigned")
        time.sleep(2.0)  # give a (wrong) rebalance the chance to show up at b
        assert a2.assigned == first_a
        assert b.assigned == first_b
        assert b.revokes == b_revokes, "the other member was rebalanced"
    finally:
        for m in members:
            m.close()


def test_commit_committed_and_resume(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    p = producer(broker.bootstrap)
    for i in range(20):
        p.send(topic, value=f"r{i}".encode())
    p.flush(30)
    p.close()
    group = unique()
    tp = TopicPartition(topic, 0)
    c = consumer(broker.bootstrap, group_id=group)
    try:
        c.assign([tp])
        take(c, 12)
        c.commit({tp: OffsetAndMetadata(12, "meta-12", -1)})
        assert c.committed(tp) == 12
        assert c.committed(tp, metadata=True).metadata == "meta-12"
    finally:
        c.close()
    c2 = consumer(broker.bootstrap, group_id=group)
    try:
        c2.assign([tp])
        got = take(c2, 8)
        assert [r.value for r in got] == [f"r{i}".encode() for i in range(12, 20)]
        c2.commit()  # the consumed position
        assert c2.committed(tp) == 20
    finally:
        c2.close()
    c3 = consumer(broker.bootstrap, group_id=unique())
    try:
        assert c3.committed(tp) is None
    finally:
        c3.close()
