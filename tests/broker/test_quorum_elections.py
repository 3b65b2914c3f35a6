"""ElectLeaders on a KRaft controller (grete/broker/quorum/elections.py): which replica is elected
and what each partition is answered, as Kafka's ReplicationControlManager decides."""

from __future__ import annotations

import uuid

from grete.broker.quorum.elections import elect
from grete.broker.quorum.partition_change import Election, PartitionChange
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.errors import ErrorCode
from grete.protocol.metadata import PartitionChangeRecord

TOPIC_ID = uuid.uuid4()


def _topics(*partitions: tuple[int, list[int], list[int]]) -> dict[str, TopicMeta]:
    """One topic "t": (leader, replicas, isr) per partition."""
    return {"t": TopicMeta("t", TOPIC_ID, {i: PartitionMeta(leader, 3, replicas, isr)
                                           for i, (leader, replicas, isr) in enumerate(partitions)})}


def _elect(topics: dict[str, TopicMeta], usable: set[int], preferred: bool,
           named: list[tuple[str, int]] | None) -> tuple[dict[tuple[str, int], ErrorCode], list[object]]:
    """With the controller's change rules, eligible leader replicas off and min ISR 1."""
    def change(meta: TopicMeta, index: int, part: PartitionMeta, how: Election) -> PartitionChangeRecord | None:
        return PartitionChange(part, meta.topic_id, index, usable.__contains__, 1, False, election=how).build()
    results, records = elect(topics, preferred, named, change)
    return results, list(records)


def _changes(records: list[object]) -> list[tuple[int, int, list[int] | None]]:
    out = []
    for record in records:
        assert isinstance(record, PartitionChangeRecord) and record.topic_id == TOPIC_ID
        out.append((record.partition_id, record.leader, record.isr))
    return out


def test_a_preferred_election_needs_the_first_replica_unfenced_and_in_sync() -> None:
    topics = _topics((2, [1, 2], [1, 2]), (1, [1, 2], [1, 2]), (2, [1, 2], [2]), (2, [3, 2], [2, 3]))
    named = [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("t", 9), ("gone", 0)]
    results, records = _elect(topics, {1, 2}, True, named)
    assert results == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
                       ("t", 2): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                       ("t", 3): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                       ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _changes(records) == [(0, 1, None)]


def test_an_unclean_election_prefers_the_isr_then_any_unfenced_replica() -> None:
    """Clean first: the first replica in assignment order that is in the ISR and unfenced (Kafka's
    PartitionChangeBuilder.electAnyLeader), then any unfenced replica, alone in the ISR."""
    topics = _topics((-1, [1, 2, 3], [3, 2]), (-1, [1, 2], [1]), (-1, [1, 2], [1]), (2, [1, 2], [2]))
    results, records = _elect(topics, {2, 3}, False, [("t", 0), ("t", 1), ("t", 3)])
    assert results == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE, ("t", 3): ErrorCode.ELECTION_NOT_NEEDED}
    assert _changes(records) == [(0, 2, None), (1, 2, [2])]
    results, records = _elect(topics, set(), False, [("t", 2)])
    assert results == {("t", 2): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE} and records == []


def test_an_election_of_every_partition_answers_only_those_that_needed_one() -> None:
    topics = _topics((2, [1, 2], [1, 2]), (1, [1, 2], [1, 2]), (2, [1, 2], [2]))
    results, records = _elect(topics, {1, 2}, True, None)
    assert results == {("t", 0): ErrorCode.NONE, ("t", 2): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert _changes(records) == [(0, 1, None)]
