"""franz-go consumer groups (cooperative-sticky, the client's default): a group of three with a
join and a leave, static membership, commit and resume."""

from __future__ import annotations

import uuid

import pytest

from tools.client_drivers import check_group_run, check_static_run, committed_offsets


def group_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_franzgo_group_of_three_join_and_leave(franzgo, make_topic):
    topic = make_topic(partitions=6)
    lines = franzgo.ok("group", topic=topic, group=group_name("fg3"), partitions=6, count=24)
    check_group_run(lines, topic, 6, 24)


@pytest.mark.slow
def test_franzgo_static_member_restart(franzgo, make_topic):
    topic = make_topic(partitions=6)
    check_static_run(franzgo.ok("static", topic=topic, group=group_name("fgs"), partitions=6))


def test_franzgo_commit_then_resume(franzgo, broker, make_topic):
    topic = make_topic(partitions=3)
    group = group_name("fgc")
    franzgo.ok("produce", topic=topic, count=30, keys=6)
    first = [x for x in franzgo.ok("consume", topic=topic, count=10, group=group) if "value" in x]
    assert len(first) == 10
    committed = committed_offsets(broker.bootstrap, group, topic, 3)
    read = {p: [x["offset"] for x in first if x["partition"] == p] for p in range(3)}
    # What was read is what was committed: the next offset of every partition read from.
    assert {p: o for p, o in committed.items() if o >= 0} == {p: max(o) + 1 for p, o in read.items() if o}
    second = [x for x in franzgo.ok("consume", topic=topic, count=20, group=group) if "value" in x]
    assert sorted(x["value"] for x in first + second) == sorted(f"v{i}" for i in range(30))
    for p in range(3):
        assert min((x["offset"] for x in second if x["partition"] == p), default=None) in \
            (committed.get(p) if committed.get(p, -1) >= 0 else 0, None)
    assert sum(committed_offsets(broker.bootstrap, group, topic, 3).values()) == 30


@pytest.mark.slow
def test_franzgo_848_group_of_three_join_and_leave(franzgo, make_topic, target):
    """The same run with kgo.ServerSideBalancer (KIP-848; needs Kafka 4): the broker assigns."""
    if target == "kafka-3.9":
        pytest.skip("the consumer group protocol is Kafka 4's")
    topic = make_topic(partitions=6)
    lines = franzgo.ok("group", topic=topic, group=group_name("fg848"), partitions=6, count=24, protocol="consumer")
    check_group_run(lines, topic, 6, 24)
