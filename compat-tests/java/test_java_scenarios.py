"""More Java kafka-clients scenarios: group membership, static members, offsetsForTimes, record size
limits and keyed partitioning (driver modes group / static / produce-ts / times / oversize)."""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest
from confluent_kafka import Producer

# Short group timers keep rebalances to a second or two (the defaults are 45 s / 3 s).
GROUP_TIMERS = ("session.timeout.ms=6000", "heartbeat.interval.ms=1000")


def group_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def check_phase(lines: list[dict[str, object]], phase: int, members: set[str], partitions: int,
                values: list[str]) -> dict[str, list[int]]:
    """One phase of the `group` mode: a clean assignment, each record delivered once, by its owner."""
    (head,) = [x for x in lines if x.get("phase") == phase and "assignment" in x]
    assignment: dict[str, list[int]] = head["assignment"]  # type: ignore[assignment]
    assert set(assignment) == members
    owned = [p for parts in assignment.values() for p in parts]
    assert sorted(owned) == list(range(partitions)), f"not one owner per partition: {assignment}"
    assert all(assignment.values()), f"a member got no partition: {assignment}"
    owner = {p: m for m, parts in assignment.items() for p in parts}
    got = [x for x in lines if x.get("phase") == phase and "value" in x]
    assert Counter(str(x["value"]) for x in got) == Counter(values), "records missing or delivered twice"
    for x in got:
        assert owner[int(x["partition"])] == x["member"]  # type: ignore[call-overload]
    return assignment


@pytest.mark.slow
def test_group_of_three_then_one_leaves(java_client, make_topic):
    topic = make_topic(partitions=6)
    n = 24
    lines = java_client.ok("group", topic, group_name("g3"), "3", "6", str(n), *GROUP_TIMERS)
    first = check_phase(lines, 1, {"m0", "m1", "m2"}, 6, [f"v{i}-{topic}" for i in range(n)])
    assert {"phase": 2, "left": "m0"} in lines
    second = check_phase(lines, 2, {"m1", "m2"}, 6, [f"v{i}-{topic}" for i in range(n, 2 * n)])
    # m0's partitions moved to the members that stayed, and were read from where m0 committed.
    assert set(first["m0"]) <= set(second["m1"]) | set(second["m2"])
    per_partition = defaultdict(list)
    for x in lines:
        if "value" in x:
            per_partition[int(x["partition"])].append(int(x["offset"]))  # type: ignore[call-overload]
    assert {p: sorted(o) for p, o in per_partition.items()} == {p: list(range(2 * n // 6)) for p in range(6)}


def test_static_member_restart_keeps_its_partitions(java_client, make_topic):
    topic = make_topic(partitions=6)
    before, after = java_client.ok("static", topic, group_name("static"), "6", *GROUP_TIMERS)
    assert before["phase"] == "before" and after["phase"] == "after"
    assert after["assignment"] == before["assignment"]
    # b saw no rebalance (no new onPartitionsAssigned); the restarted a got its assignment once.
    assert after["events"]["b"] == before["events"]["b"]
    assert after["events"]["a"] == 1


def test_offsets_for_times(java_client, make_topic):
    topic = make_topic(partitions=1)
    base = int(time.time() * 1000) - 600_000  # in the past: brokers may refuse timestamps far ahead
    stamps = [base, base + 10, base + 10, base + 20, base + 40, base + 40, base + 50]
    plan = ",".join(map(str, stamps[:3])) + "/" + ",".join(map(str, stamps[3:]))  # two batches
    acks = java_client.ok("produce-ts", topic, plan)
    assert [a["offset"] for a in acks] == list(range(len(stamps)))

    queries = [base - 1, base, base + 5, base + 10, base + 15, base + 20, base + 41, base + 50, base + 51]
    found = java_client.ok("times", topic, "0", ",".join(map(str, queries)))
    assert [f["ts"] for f in found] == queries
    for f in found:
        # The first offset whose timestamp is >= the target, computed from what was written.
        first = next((i for i, t in enumerate(stamps) if t >= int(f["ts"])), None)  # type: ignore[call-overload]
        assert f["offset"] == first, f
        assert f["timestamp"] == (None if first is None else stamps[first])


def test_oversized_record_refused(java_client, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "2048"})
    refused, small = java_client.ok("oversize", topic, "8000")
    assert refused["error"] == "RecordTooLargeException", refused
    # The refused record was not appended: the next one is the first in the log.
    assert small == {"partition": 0, "offset": 0}


def test_keyed_partitioning(java_client, make_topic, broker):
    topic = make_topic(partitions=6)
    n = 40
    runs = [java_client.ok("produce", topic, str(n)) for _ in range(2)]
    for acks in runs:
        assert len(acks) == n
    key_partition: dict[str, set[int]] = defaultdict(set)
    for acks in runs:  # two producers, same key -> same partition every time
        for i, a in enumerate(acks):
            key_partition[f"k{i % 4}"].add(int(a["partition"]))  # type: ignore[call-overload]
    assert all(len(parts) == 1 for parts in key_partition.values()), dict(key_partition)
    # librdkafka's murmur2 partitioner is documented to match Java's default: an independent oracle.
    delivered: dict[str, int] = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key in key_partition:
        p.produce(topic, key=key.encode(), value=b"x",
                  on_delivery=lambda err, m: delivered.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0
    assert delivered == {k: parts.pop() for k, parts in key_partition.items()}
