"""ElectLeaders as a KRaft quorum's active controller carries it out (Kafka's
ReplicationControlManager.electLeaders), as PartitionChangeRecords decided by
grete/broker/quorum/partition_change.py:

- preferred: the partition's first assigned replica becomes its leader if it can lead (unfenced,
  in the ISR, or in the ELR while the ISR is empty); PREFERRED_LEADER_NOT_AVAILABLE otherwise;
  ELECTION_NOT_NEEDED if it leads already;
- unclean: a partition without a leader gets a clean leader if one can lead (the ISR, the ELR, the
  last known leader), else the first unfenced replica, whose ISR is then that replica alone
  (ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is unfenced); ELECTION_NOT_NEEDED if it has a leader.

Every named partition is answered (UNKNOWN_TOPIC_OR_PARTITION for one that does not exist); an
election of all partitions (None) answers only those where an election was needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from grete.broker.quorum.partition_change import NO_CHANGE, NO_LEADER, Election
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode
from grete.protocol.metadata import PartitionChangeRecord

TopicPartition = tuple[str, int]
Change = Callable[[TopicMeta, int, PartitionMeta, Election], PartitionChangeRecord | None]


def elect(topics: Mapping[str, TopicMeta], preferred: bool, partitions: list[TopicPartition] | None,
          change: Change) -> tuple[dict[TopicPartition, ErrorCode], list[Message]]:
    """The answer for each partition and the records that make the elections."""
    named: Iterable[TopicPartition] = partitions if partitions is not None else (
        (name, index) for name, meta in sorted(topics.items()) for index in sorted(meta.partitions))
    results: dict[TopicPartition, ErrorCode] = {}
    records: list[Message] = []
    for name, index in named:
        meta = topics.get(name)
        part = meta.partitions.get(index) if meta is not None else None
        if meta is None or part is None:
            results[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        code, record = _elect_one(meta, index, part, preferred, change)
        if record is not None:
            records.append(record)
        if partitions is not None or code != ErrorCode.ELECTION_NOT_NEEDED:
            results[(name, index)] = code
    return results, records


def _elect_one(meta: TopicMeta, index: int, part: PartitionMeta, preferred: bool,
               change: Change) -> tuple[ErrorCode, Message | None]:
    if preferred:
        target = part.replicas[0] if part.replicas else NO_LEADER
        if part.leader == target:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        record = change(meta, index, part, Election.PREFERRED)
        if record is None or record.leader != target:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
        return ErrorCode.NONE, record
    if part.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    record = change(meta, index, part, Election.UNCLEAN)
    if record is None or record.leader in (NO_CHANGE, NO_LEADER):
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, record
