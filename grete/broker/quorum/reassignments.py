"""Partition reassignment (KIP-455) on a KRaft quorum's active controller, as Kafka's
ReplicationControlManager makes it (PartitionReassignmentReplicas, PartitionReassignmentRevert), in
PartitionChangeRecords:

- started: the replicas become the target followed by the current replicas it leaves out, with
  AddingReplicas (target - current) and RemovingReplicas (current - target); the brokers of the new
  replicas see themselves among the replicas and start following;
- completed once the ISR holds every replica of the target (the leader's AlterPartition brings it
  there, or it is there already: a reordering, a shrink): the replicas become the target, the ISR is
  trimmed to it, both lists are cleared and the leader epoch bumped, the leader moved into the target
  if it was being removed; the removed replicas' brokers then delete theirs (they are no replica);
- cancelled (a null target): the replicas being added leave the replicas and the ISR, the lists are
  cleared (refused when no ISR member would be left, unless the topic allows unclean elections).

The metadata store keeps a partition's replicas and ISR only: which replicas are being added and
removed is kept here, from the same committed records (PartitionRecord and PartitionChangeRecord's
AddingReplicas/RemovingReplicas, null meaning unchanged), so a controller that takes over carries on
what its predecessor, grete's or Kafka's, started.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Protocol

from grete.broker.cluster_view import Reassignment, TopicPartition
from grete.broker.handlers.create_topics import check_replica_list
from grete.broker.quorum.partition_change import NO_CHANGE
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord

UNCLEAN_ELECTION = "unclean.leader.election.enable"
Moving = tuple[list[int], list[int]]  # (adding, removing)
Outcome = dict[TopicPartition, tuple[ErrorCode, str | None]]


class ReassignmentLists:
    """The adding and removing replicas of every partition under reassignment, as committed."""

    def __init__(self) -> None:
        self._moving: dict[tuple[uuid.UUID, int], Moving] = {}

    def applied(self, record: Message) -> None:
        if isinstance(record, PartitionRecord):
            self._set((record.topic_id, record.partition_id), record.adding_replicas or [],
                      record.removing_replicas or [])
        elif isinstance(record, PartitionChangeRecord):
            if record.adding_replicas is None and record.removing_replicas is None:
                return
            key = (record.topic_id, record.partition_id)
            adding, removing = self._moving.get(key, ([], []))
            self._set(key, adding if record.adding_replicas is None else record.adding_replicas,
                      removing if record.removing_replicas is None else record.removing_replicas)
        elif isinstance(record, RemoveTopicRecord):
            self._moving = {key: moving for key, moving in self._moving.items() if key[0] != record.topic_id}

    def reset(self) -> None:
        self._moving.clear()

    def partition_record(self, record: PartitionRecord) -> None:
        """A snapshot's PartitionRecord with the replicas its reassignment is adding and removing."""
        adding, removing = self._moving.get((record.topic_id, record.partition_id), ([], []))
        record.adding_replicas, record.removing_replicas = list(adding), list(removing)

    def _set(self, key: tuple[uuid.UUID, int], adding: list[int], removing: list[int]) -> None:
        if adding or removing:
            self._moving[key] = (list(adding), list(removing))
        else:
            self._moving.pop(key, None)

    def of(self, topic_id: uuid.UUID, index: int) -> Moving | None:
        return self._moving.get((topic_id, index))

    def listed(self, topic_by_id: Callable[[uuid.UUID], TopicMeta | None]) -> dict[TopicPartition, Reassignment]:
        """Every reassignment in progress: (replicas, adding, removing) by partition."""
        found: dict[TopicPartition, Reassignment] = {}
        for (topic_id, index), (adding, removing) in self._moving.items():
            meta = topic_by_id(topic_id)
            part = meta.partitions.get(index) if meta is not None else None
            if meta is not None and part is not None:
                found[(meta.name, index)] = (list(part.replicas), list(adding), list(removing))
        return found


class Decide(Protocol):
    """The partition's change to ``isr`` and ``replicas`` (leader election, eligible leader replicas
    and epochs, as for any change: partition_change.py); None when nothing changes there."""

    def __call__(self, meta: TopicMeta, index: int, part: PartitionMeta, isr: list[int], replicas: list[int]
                 ) -> PartitionChangeRecord | None: ...


class Planner:
    """The records for reassignments asked for, and for an ISR change that may complete one, decided
    on the committed state: the topics, the lists, the registered brokers; the leader and the eligible
    replicas of each step are decided as for any partition change (``decide``)."""

    def __init__(self, topics: Mapping[str, TopicMeta], lists: ReassignmentLists, registered: set[int],
                 decide: Decide, directory_of: Callable[[int], uuid.UUID]) -> None:
        self.topics = topics
        self.lists = lists
        self.registered = registered
        self.decide = decide
        self.directory_of = directory_of

    def reassign(self, wanted: Mapping[TopicPartition, list[int] | None]) -> tuple[Outcome, list[Message]]:
        """Each partition's answer (Kafka's errors and messages) and the records of those accepted."""
        outcome: Outcome = {}
        records: list[Message] = []
        for (name, index), target in wanted.items():
            try:
                record = self._reassign_one(name, index, target)
            except KafkaError as exc:
                outcome[(name, index)] = (exc.code, exc.message)
                continue
            if record is not None:
                records.append(record)
            outcome[(name, index)] = (ErrorCode.NONE, None)
        return outcome, records

    def _reassign_one(self, name: str, index: int, target: list[int] | None) -> PartitionChangeRecord | None:
        meta = self.topics.get(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
        part = meta.partitions.get(index)
        if part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}.")
        moving = self.lists.of(meta.topic_id, index)
        if target is None:
            return self._reverted(meta, index, part, moving)
        check_replica_list(target, self.registered, None)
        removing = sorted(set(part.replicas) - set(target))
        adding = sorted(set(target) - set(part.replicas))
        return self.change(meta, index, part, moving, (list(target) + removing, list(part.isr), adding, removing))

    def _reverted(self, meta: TopicMeta, index: int, part: PartitionMeta,
                  moving: Moving | None) -> PartitionChangeRecord | None:
        if moving is None:
            raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
        adding = moving[0]
        replicas = [r for r in part.replicas if r not in adding]
        isr = [r for r in part.isr if r not in adding]
        if not isr:  # only replicas being added are in sync: going back needs an unclean election
            if meta.configs.get(UNCLEAN_ELECTION) != "true" or not replicas:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unable to revert partition assignment "
                                 f"for {meta.name}:{index} because it would require an unclean leader election.")
            isr = [replicas[0]]  # Kafka's PartitionReassignmentRevert; the election may pick another
        return self.change(meta, index, part, moving, (replicas, isr, [], []))

    def change(self, meta: TopicMeta, index: int, part: PartitionMeta, moving: Moving | None,
               wanted: tuple[list[int], list[int], list[int], list[int]]) -> PartitionChangeRecord | None:
        """The record taking the partition to ``wanted`` (replicas, ISR, adding, removing), the
        reassignment completed if that ISR allows it (Kafka's PartitionChangeBuilder); None if nothing
        changes."""
        replicas, isr, adding, removing = wanted
        if (adding or removing) and all(r in isr for r in replicas if r not in removing) and any(
                r not in removing for r in isr):
            replicas = [r for r in replicas if r not in removing]
            isr = [r for r in isr if r not in removing]
            adding, removing = [], []
        record = self.decide(meta, index, part, isr, replicas) or PartitionChangeRecord(
            partition_id=index, topic_id=meta.topic_id)
        if replicas != part.replicas:
            record.replicas = replicas
            # A replica that stays keeps its log dir; a new one goes where its broker places it.
            record.directories = [d if (d := part.directory(r)) is not None else self.directory_of(r)
                                  for r in replicas]
        if (adding, removing) != (moving or ([], [])):
            record.adding_replicas, record.removing_replicas = adding, removing
        if (record.replicas is None and record.isr is None and record.adding_replicas is None
                and record.leader == NO_CHANGE and record.eligible_leader_replicas is None
                and record.last_known_elr is None):
            return None
        return record
