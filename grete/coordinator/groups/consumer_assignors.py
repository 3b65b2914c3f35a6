"""KIP-848's server-side assignors, ``uniform`` and ``range`` (``group.consumer.assignors``).

An assignor maps each member to the partitions it should own (the *target assignment*), from the
members' subscriptions (topic names, already resolved from regexes) and the topics' partition counts.
Partitions are ``(topic id, partition)`` pairs: 848 assigns by topic id. Both are sticky, as Kafka's
are: a member keeps the target partitions it had wherever balance allows, so a rebalance moves as few
partitions as it can (fewer revocations for the members to acknowledge).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[uuid.UUID, int]
Assignment = frozenset[TopicPartition]
# topic name -> (topic id, number of partitions), for the topics that exist.
TopicView = Mapping[str, tuple[uuid.UUID, int]]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)


@dataclass(frozen=True, slots=True)
class AssignorMember:
    member_id: str
    topics: frozenset[str]     # subscribed topic names (regexes resolved)
    previous: Assignment       # its current target assignment, for stickiness


def assign(assignor: str, members: list[AssignorMember], topics: TopicView) -> dict[str, Assignment]:
    """The target assignment of every member (members without a partition get an empty set)."""
    if assignor == RANGE:
        return _range(members, topics)
    return _uniform(members, topics)


def _uniform(members: list[AssignorMember], topics: TopicView) -> dict[str, Assignment]:
    """Balanced across members, each partition to one of the members subscribed to its topic: members
    keep what they had up to their fair share, then the least loaded eligible member takes each of
    the rest. With one subscription for all (Kafka's homogeneous case) the counts differ by at most 1."""
    ordered = sorted(members, key=lambda m: m.member_id)
    eligible: dict[TopicPartition, list[str]] = {}
    for name in sorted({t for m in ordered for t in m.topics}):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        subscribers = [m.member_id for m in ordered if name in m.topics]
        for p in range(count):
            eligible[(topic_id, p)] = subscribers
    result: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ordered}
    if not ordered:
        return {}
    # A member's fair share: its eligible partitions spread over everyone eligible for them.
    quota = {m.member_id: 0.0 for m in ordered}
    for subscribers in eligible.values():
        for member_id in subscribers:
            quota[member_id] += 1 / len(subscribers)
    taken: set[TopicPartition] = set()
    for m in ordered:
        limit = int(-(-quota[m.member_id] // 1))  # ceil: the sticky part never exceeds a fair share + 1
        for tp in sorted(m.previous):
            if len(result[m.member_id]) >= limit:
                break
            if tp in eligible and m.member_id in eligible[tp] and tp not in taken:
                result[m.member_id].add(tp)
                taken.add(tp)
    for tp in sorted(eligible):
        if tp in taken:
            continue
        target = min(eligible[tp], key=lambda mid: (len(result[mid]), mid))
        result[target].add(tp)
    _rebalance(result, eligible)
    return {mid: frozenset(tps) for mid, tps in result.items()}


def _rebalance(result: dict[str, set[TopicPartition]], eligible: dict[TopicPartition, list[str]]) -> None:
    """Move partitions from the most to the least loaded eligible member until no move narrows the gap
    (stickiness may have left a member one over while another joined with nothing)."""
    moved = True
    while moved:
        moved = False
        for tp, subscribers in sorted(eligible.items()):
            owner = next((mid for mid in subscribers if tp in result[mid]), None)
            if owner is None:
                continue
            poorest = min(subscribers, key=lambda mid: (len(result[mid]), mid))
            if len(result[owner]) - len(result[poorest]) > 1:
                result[owner].discard(tp)
                result[poorest].add(tp)
                moved = True


def _range(members: list[AssignorMember], topics: TopicView) -> dict[str, Assignment]:
    """Per topic, contiguous ranges over the topic's subscribers in member id order (the first
    ``partitions % subscribers`` get one more), so members subscribed to co-partitioned topics get
    the same partition numbers of each."""
    result: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    for name in sorted({t for m in members for t in m.topics}):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        subscribers = sorted(m.member_id for m in members if name in m.topics)
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            n = share + (1 if i < extra else 0)
            result[member_id].update((topic_id, p) for p in range(start, start + n))
            start += n
    return {mid: frozenset(tps) for mid, tps in result.items()}
