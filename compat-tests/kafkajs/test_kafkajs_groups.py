"""KafkaJS consumer groups: a group of three with a join and a leave, commit and resume.
(KafkaJS has no static membership.)"""

from __future__ import annotations

import uuid

import pytest

from tools.client_drivers import check_group_run, committed_offsets


def group_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_kafkajs_group_of_three_join_and_leave(kafkajs, make_topic):
    topic = make_topic(partitions=6)
    lines = kafkajs.ok("group", topic=topic, group=group_name("kj3"), partitions=6, count=24)
    check_group_run(lines, topic, 6, 24)


def test_kafkajs_commit_then_resume(kafkajs, broker, make_topic, produce):
    topic = make_topic(partitions=3)
    group = group_name("kjc")
    for p in range(3):
        produce(topic, [(None, f"v{p * 10 + i}".encode()) for i in range(10)], partition=p)
    first = [x for x in kafkajs.ok("consume", topic=topic, count=10, group=group) if "value" in x]
    assert len(first) == 10
    committed = committed_offsets(broker.bootstrap, group, topic, 3)
    read = {p: [x["offset"] for x in first if x["partition"] == p] for p in range(3)}
    assert {p: o for p, o in committed.items() if o >= 0} == {p: max(o) + 1 for p, o in read.items() if o}
    second = [x for x in kafkajs.ok("consume", topic=topic, count=20, group=group) if "value" in x]
    assert sorted(x["value"] for x in first + second) == sorted(f"v{i}" for i in range(30))
    for p in range(3):
        assert min((x["offset"] for x in second if x["partition"] == p), default=None) in \
            (committed.get(p) if committed.get(p, -1) >= 0 else 0, None)
    assert sum(committed_offsets(broker.bootstrap, group, topic, 3).values()) == 30
