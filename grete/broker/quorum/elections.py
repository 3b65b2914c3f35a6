"""ElectLeaders as a KRaft quorum's active controller carries it out (Kafka's
ReplicationControlManager.electLeaders), as PartitionChangeRecords:

- preferred: the partition's first assigned replica becomes its leader if it is unfenced and in the
  ISR (PREFERRED_LEADER_NOT_AVAILABLE otherwise); ELECTION_NOT_NEEDED if it leads already;
- unclean: a partition without a leader gets the first unfenced ISR member, or else the first
  unfenced replica, whose ISR is then that replica alone (ELIGIBLE_LEADERS_NOT_AVAILABLE when no
  replica is unfenced); ELECTION_NOT_NEEDED if it has a leader.

Every named partition is answered (UNKNOWN_TOPIC_OR_PARTITION for one that does not exist); an
election of all partitions (None) answers only those where an election was needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode
from grete.protocol.metadata import PartitionChangeRecord

TopicPartition = tuple[str, int]
NO_LEADER = -1


def elect(topics: Mapping[str, TopicMeta], usable: set[int], preferred: bool,
          partitions: list[TopicPartition] | None) -> tuple[dict[TopicPartition, ErrorCode], list[Message]]:
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
        code, record = _elect_one(meta, index, part, usable, preferred)
        if record is not None:
            records.append(record)
        if partitions is not None or code != ErrorCode.ELECTION_NOT_NEEDED:
            results[(name, index)] = code
    return results, records


def _elect_one(meta: TopicMeta, index: int, part: PartitionMeta, usable: set[int],
               preferred: bool) -> tuple[ErrorCode, Message | None]:
    if preferred:
        target = part.replicas[0] if part.replicas else NO_LEADER
        if part.leader == target:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        if target not in usable or target not in part.isr:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
        return ErrorCode.NONE, PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id, leader=target)
    if part.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    in_sync = next((r for r in part.isr if r in usable), None)
    if in_sync is not None:
        return ErrorCode.NONE, PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id, leader=in_sync)
    unclean = next((r for r in part.replicas if r in usable), None)
    if unclean is None:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id, leader=unclean,
                                                 isr=[unclean])
