"""Partition leadership as a KRaft quorum's active controller changes it (Kafka's
ReplicationControlManager), as PartitionChangeRecords:

- AlterPartition from a partition's leader: the new ISR is taken if the request carries the
  partition's current leader epoch and partition epoch (else FENCED_LEADER_EPOCH /
  INVALID_UPDATE_VERSION), comes from the leader (NOT_LEADER_OR_FOLLOWER), and names only unfenced
  registered brokers of their current epochs (INELIGIBLE_REPLICA);
- a broker fenced (session expired, or asked to shut down): every partition it leads gets the first
  other ISR member that is unfenced as leader (none: leader -1, the partition offline until one
  comes back, as Kafka without unclean election), and it leaves every ISR it is in but the last;
- a broker unfenced: every partition without a leader whose ISR it is in gets a leader again, the
  first replica in assignment order that is in the ISR and unfenced (Kafka's handleBrokerUnfenced);
- reassignments (grete/broker/quorum/reassignments.py): started and cancelled here, completed by the
  AlterPartition whose ISR holds the whole target; one that moves the leader away answers the sender
  NEW_LEADER_ELECTED, as Kafka's does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from grete.broker.cluster_view import Reassignment, TopicPartition
from grete.broker.quorum.brokers import BrokerRegistry
from grete.broker.quorum.reassignments import Outcome, Planner, ReassignmentLists
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from grete.protocol.metadata import PartitionChangeRecord

Commit = Callable[[Sequence[Message]], Awaitable[None]]
NO_LEADER = -1
NO_CHANGE = -2  # PartitionChangeRecord's Leader: unchanged


class PartitionControl:
    def __init__(self, store: QuorumMetadataStore, registry: BrokerRegistry, commit: Commit,
                 leads: Callable[[], bool]) -> None:
        self._store = store
        self._registry = registry
        self._commit = commit
        self._leads = leads
        # One change at a time, each decided on the state the one before left: a change is read
        # from the committed records, so two decided together (two brokers fenced at once, an
        # AlterPartition meanwhile) would each undo the other's part (Kafka's controller has one queue).
        self._changing = asyncio.Lock()
        self.reassigning = ReassignmentLists()

    def applied(self, record: Message) -> None:
        """A committed record (what is being reassigned is kept from them)."""
        self.reassigning.applied(record)

    def _planner(self) -> Planner:
        return Planner(self._store.topics(), self.reassigning, set(self._registry.brokers),
                       {b.id for b in self._registry.live()}, self._registry.directory_of)

    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]) -> Outcome:
        """Start (a target) or cancel (None) reassignments, one batch; NOT_CONTROLLER (raised) on a
        voter that does not lead."""
        async with self._changing:
            if not self._leads():
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum")
            outcome, records = self._planner().reassign(wanted)
            if records:
                await self._commit(records)
            return outcome

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        if not self._leads():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum")
        return self.reassigning.listed(self._store.topic_by_id)

    async def alter_partition(self, request: AlterPartitionRequest, version: int) -> AlterPartitionResponse:
        async with self._changing:
            return await self._alter_partition(request, version)

    async def broker_fenced(self, broker_id: int) -> None:
        """Move leadership and ISR membership away from a fenced broker, one batch of records."""
        async with self._changing:
            await self._broker_fenced(broker_id)

    async def broker_unregistered(self, broker_id: int, record: Message) -> None:
        """The partitions' changes a fenced broker brings, with the UnregisterBrokerRecord, one batch."""
        async with self._changing:
            await self._commit([*self._fenced_records(broker_id), record])

    async def broker_unfenced(self, broker_id: int) -> None:
        """Partitions left without a leader that the unfenced broker can lead get one, one batch."""
        async with self._changing:
            await self._broker_unfenced(broker_id)

    async def _alter_partition(self, request: AlterPartitionRequest, version: int) -> AlterPartitionResponse:
        Response = AlterPartitionResponse
        if not self._leads():
            return Response(error_code=ErrorCode.NOT_CONTROLLER)
        sender = self._registry.brokers.get(request.broker_id)
        if sender is None or sender.epoch != request.broker_epoch:
            return Response(error_code=ErrorCode.STALE_BROKER_EPOCH)
        records: list[Message] = []
        answers: list[AlterPartitionResponse.TopicData] = []
        planner = self._planner()
        for topic in request.topics:
            meta = self._store.topic_by_id(topic.topic_id)
            answer = Response.TopicData(topic_name=topic.topic_name, topic_id=topic.topic_id)
            answers.append(answer)
            for wanted in topic.partitions:
                isr = wanted.new_isr if version < 3 else [b.broker_id for b in wanted.new_isr_with_epochs]
                part = meta.partitions.get(wanted.partition_index) if meta is not None else None
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if part is None else self._refusal(
                    request.broker_id, part.leader, part.leader_epoch, part.partition_epoch, wanted, isr)
                if part is None or error is not ErrorCode.NONE:
                    answer.partitions.append(Response.PartitionData(partition_index=wanted.partition_index,
                                                                    error_code=error))
                    continue
                assert meta is not None
                record = self._isr_change(planner, meta, wanted.partition_index, part, isr)
                records.append(record)
                if record.leader not in (NO_CHANGE, request.broker_id):  # a reassignment moved it away
                    answer.partitions.append(Response.PartitionData(partition_index=wanted.partition_index,
                                                                    error_code=ErrorCode.NEW_LEADER_ELECTED))
                    continue
                answer.partitions.append(Response.PartitionData(
                    partition_index=wanted.partition_index, error_code=ErrorCode.NONE, leader_id=part.leader,
                    leader_epoch=part.leader_epoch + int(record.leader != NO_CHANGE), isr=list(record.isr or isr),
                    partition_epoch=part.partition_epoch + 1))
        if records:
            try:
                await self._commit(records)
            except KafkaError as exc:
                return Response(error_code=exc.code)
        return Response(error_code=ErrorCode.NONE, topics=answers)

    def _isr_change(self, planner: Planner, meta: TopicMeta, index: int, part: PartitionMeta,
                    isr: list[int]) -> PartitionChangeRecord:
        """The new ISR, completing the partition's reassignment if it holds the whole target."""
        moving = self.reassigning.of(meta.topic_id, index)
        record = planner.change(meta, index, part, moving, (list(part.replicas), list(isr), *moving)) if moving else None
        if record is None:
            return PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id, isr=list(isr), leader=NO_CHANGE)
        if record.isr is None:
            record.isr = list(isr)
        return record

    def _refusal(self, sender: int, leader: int, leader_epoch: int, partition_epoch: int,
                 wanted: AlterPartitionRequest.PartitionData, isr: list[int]) -> ErrorCode:
        if sender != leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if wanted.leader_epoch != leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if wanted.partition_epoch != partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        usable = {b.id for b in self._registry.live()}
        if any(member not in usable for member in isr):
            return ErrorCode.INELIGIBLE_REPLICA
        return ErrorCode.NONE

    async def _broker_fenced(self, broker_id: int) -> None:
        if not self._leads():
            return
        records = self._fenced_records(broker_id)
        if records:
            await self._commit(records)

    def _fenced_records(self, broker_id: int) -> list[Message]:
        """Leaderships moved off ``broker_id`` to another ISR member, and it out of every ISR (never
        leaving one empty)."""
        usable = {b.id for b in self._registry.live()} - {broker_id}
        records: list[Message] = []
        for meta in self._store.topics().values():
            for index, part in sorted(meta.partitions.items()):
                if broker_id not in part.isr and part.leader != broker_id:
                    continue
                isr = [r for r in part.isr if r != broker_id] or list(part.isr)
                leader = NO_CHANGE
                if part.leader == broker_id:
                    leader = next((r for r in isr if r in usable), NO_LEADER)
                records.append(PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id,
                                                     isr=isr if isr != part.isr else None, leader=leader))
        return records


    async def _broker_unfenced(self, broker_id: int) -> None:
        if not self._leads():
            return
        usable = {b.id for b in self._registry.live()} | {broker_id}
        records: list[Message] = []
        for meta in self._store.topics().values():
            for index, part in sorted(meta.partitions.items()):
                if part.leader != NO_LEADER or broker_id not in part.isr:
                    continue
                leader = next((r for r in part.replicas if r in part.isr and r in usable), NO_LEADER)
                if leader != NO_LEADER:
                    records.append(PartitionChangeRecord(partition_id=index, topic_id=meta.topic_id, leader=leader))
        if records:
            await self._commit(records)
