"""Partition leadership as a KRaft quorum's active controller changes it (Kafka's
ReplicationControlManager), as PartitionChangeRecords:

- AlterPartition from a partition's leader: the new ISR is taken if the request carries the
  partition's current leader epoch and partition epoch (else FENCED_LEADER_EPOCH /
  INVALID_UPDATE_VERSION), comes from the leader (NOT_LEADER_OR_FOLLOWER), and names only unfenced
  registered brokers of their current epochs (INELIGIBLE_REPLICA);
- a broker fenced (session expired, or asked to shut down): it leaves every ISR, and every
  partition it leads gets the first other ISR member that is unfenced as leader (none: leader -1,
  the partition offline until one comes back, as Kafka without unclean election);
- a broker unfenced: every partition without a leader gets one again if it can (Kafka's
  handleBrokerUnfenced);
- a broker registering a new incarnation: out of every ISR; if it did not shut down cleanly (the
  epoch it last had is not the one it says it had), out of every ELR too, in the registration's batch;
- each change decided by :mod:`grete.broker.quorum.partition_change` (Kafka's PartitionChangeBuilder):
  with eligible leader replicas on, replicas leaving an ISR below ``min.insync.replicas`` become
  eligible leaders, the ISR may become empty, and a leaderless partition's leader comes from its ELR;
- a broker's log dirs failed (its heartbeat says which), or a replica placed in one already failed
  (AssignReplicasToDirs): its replicas there leave their ISRs and leaderships as a fenced broker's do;
- reassignments (grete/broker/quorum/reassignments.py): started and cancelled here, completed by the
  AlterPartition whose ISR holds the whole target; one that moves the leader away answers the sender
  NEW_LEADER_ELECTED, as Kafka's does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

from grete.broker.cluster_view import Reassignment, TopicPartition
from grete.broker.quorum.brokers import BrokerRegistry
from grete.broker.quorum.dir_assignments import dir_assignments
from grete.broker.quorum.elections import elect
from grete.broker.quorum.partition_change import NO_CHANGE, NO_LEADER, Election, PartitionChange
from grete.broker.quorum.reassignments import Outcome, Planner, ReassignmentLists
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.kraft.store import ELR_FEATURE
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
)
from grete.protocol.metadata import PartitionChangeRecord

Commit = Callable[[Sequence[Message]], Awaitable[None]]


class PartitionControl:
    def __init__(self, store: QuorumMetadataStore, registry: BrokerRegistry, commit: Commit,
                 leads: Callable[[], bool], defaults: Callable[[str], str | None] = lambda _key: None,
                 changing: asyncio.Lock | None = None) -> None:
        self._store = store
        self._defaults = defaults  # the controller's own value of a topic config's broker key
        self._registry = registry
        self._commit = commit
        self._leads = leads
        # One change at a time, each decided on the state the one before left: a change is read
        # from the committed records, so two decided together (two brokers fenced at once, an
        # AlterPartition meanwhile) would each undo the other's part (Kafka's controller has one queue).
        self._changing = changing if changing is not None else asyncio.Lock()  # the store's too: deletions
        self.reassigning = ReassignmentLists()

    def applied(self, record: Message) -> None:
        """A committed record (what is being reassigned is kept from them)."""
        self.reassigning.applied(record)

    def _planner(self) -> Planner:
        usable = self._usable()
        return Planner(self._store.topics(), self.reassigning, set(self._registry.brokers),
                       lambda meta, index, part, isr, replicas: self.change(meta, index, part, usable, target_isr=isr,
                                                                            target_replicas=replicas),
                       self._registry.directory_of)

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

    async def elect_leaders(self, preferred: bool, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, ErrorCode]:
        """ElectLeaders (grete/broker/quorum/elections.py), one batch; NOT_CONTROLLER (raised) on a
        voter that does not lead."""
        async with self._changing:
            if not self._leads():
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum")
            usable = self._usable()
            results, records = elect(self._store.topics(), preferred, partitions,
                                     lambda meta, index, part, how: self.change(meta, index, part, usable,
                                                                                election=how))
            if records:
                await self._commit(records)
            return results

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
            await self._commit([*self._fenced_records(broker_id, elr_too=True), record])

    async def broker_registered(self, broker_id: int, clean: bool, record: Message) -> None:
        """A new incarnation's RegisterBrokerRecord, after the changes its last one's end brings:
        out of every ISR; after an unclean shutdown (with ELR on), out of every ELR too (Kafka
        4.3.1's handleBrokerShutdown), one batch."""
        async with self._changing:
            unclean = not clean and self._elr_enabled()
            await self._commit([*self._fenced_records(broker_id, elr_too=unclean, unclean=unclean), record])

    async def broker_unfenced(self, broker_id: int) -> None:
        """Partitions left without a leader that the unfenced broker can lead get one, one batch."""
        async with self._changing:
            await self._broker_unfenced(broker_id)

    async def dirs_offline(self, broker_id: int, dirs: set[uuid.UUID], record: Message) -> None:
        """A broker's log dirs failed: its replicas there leave their ISRs and leaderships, as if
        that broker were fenced for those partitions alone, with ``record`` (its registration's
        dirs left online), one batch."""
        async with self._changing:
            await self._commit([*self._fenced_records(broker_id, only=lambda part: part.directory(broker_id) in dirs),
                                record])

    async def assign_dirs(self, request: AssignReplicasToDirsRequest, online: Callable[[uuid.UUID], bool]
                          ) -> AssignReplicasToDirsResponse:
        """Each named replica of the broker recorded in the log dir it says holds it; one placed in
        a dir already offline leaves its ISR and leadership in the same batch."""
        async with self._changing:
            records, answer, offline = dir_assignments(self._store.topic_by_id, request)
            moved = {(topic_id, index) for topic_id, index, directory in offline if not online(directory)}
            if moved:
                records += self._fenced_records(request.broker_id, only_partitions=moved)
            if records:
                await self._commit(records)
            return answer

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
                if record is None:  # the ISR it has: answered as it stands, nothing written
                    answer.partitions.append(Response.PartitionData(
                        partition_index=wanted.partition_index, error_code=ErrorCode.NONE, leader_id=part.leader,
                        leader_epoch=part.leader_epoch, isr=list(part.isr), partition_epoch=part.partition_epoch))
                    continue
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
                    isr: list[int]) -> PartitionChangeRecord | None:
        """The new ISR, completing the partition's reassignment if it holds the whole target; None
        when nothing changes."""
        moving = self.reassigning.of(meta.topic_id, index)
        if moving:
            return planner.change(meta, index, part, moving, (list(part.replicas), list(isr), *moving))
        return self.change(meta, index, part, self._usable(), target_isr=list(isr))

    # --- one change ----------------------------------------------------------------------------
    def change(self, meta: TopicMeta, index: int, part: PartitionMeta, acceptable: set[int], *,
               target_isr: list[int] | None = None, target_replicas: list[int] | None = None,
               election: Election | None = None, unclean_shutdown: Sequence[int] = ()) -> PartitionChangeRecord | None:
        """The record of one partition's change (partition_change.py), None when nothing changes."""
        if election is None:
            election = Election.UNCLEAN if self._topic_value(meta, "unclean.leader.election.enable") == "true" \
                else Election.ONLINE
        return PartitionChange(part, meta.topic_id, index, acceptable.__contains__, self._min_isr(meta, part),
                               self._elr_enabled(), target_isr=target_isr, target_replicas=target_replicas,
                               election=election,
                               unclean_shutdown=unclean_shutdown).build()

    def _usable(self) -> set[int]:
        return {b.id for b in self._registry.live()}

    def _elr_enabled(self) -> bool:
        _, features = self._store.finalized_features()
        return (features or {}).get(ELR_FEATURE, 0) >= 1

    def _topic_value(self, meta: TopicMeta, key: str) -> str | None:
        """A topic config's value: the topic's, the cluster's default, or the controller's own."""
        value = meta.configs.get(key)
        if value is None:
            value = self._store.broker_configs("").get(key)
        return value if value is not None else self._defaults(key)

    def _min_isr(self, meta: TopicMeta, part: PartitionMeta) -> int:
        """``min.insync.replicas``, at most the replication factor (Kafka's getTopicEffectiveMinIsr:
        partition 0's, reassigned or not)."""
        try:
            configured = int(self._topic_value(meta, "min.insync.replicas") or 1)
        except ValueError:
            configured = 1
        first = meta.partitions.get(0, part)
        return min(configured, max(len(first.replicas), 1))

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

    def _fenced_records(self, broker_id: int, *, elr_too: bool = False, unclean: bool = False,
                        only: Callable[[PartitionMeta], bool] | None = None,
                        only_partitions: set[tuple[uuid.UUID, int]] | None = None) -> list[Message]:
        """``broker_id`` out of every ISR (and, ``elr_too``, every partition whose ELR holds it is
        re-decided), its leaderships moved to another ISR (or ELR) member; ``unclean``: it shut down
        uncleanly, so it leaves the ELRs and may not lead. ``only``, ``only_partitions``: those
        partitions alone (its replicas in a failed log dir)."""
        usable = self._usable() - {broker_id}
        records: list[Message] = []
        for meta in self._store.topics().values():
            for index, part in sorted(meta.partitions.items()):
                if broker_id not in part.isr and part.leader != broker_id and not (elr_too and broker_id in part.elr):
                    continue
                if (only is not None and not only(part)) or (
                        only_partitions is not None and (meta.topic_id, index) not in only_partitions):
                    continue
                record = self.change(meta, index, part, usable, target_isr=[r for r in part.isr if r != broker_id],
                                     unclean_shutdown=[broker_id] if unclean else ())
                if record is not None:
                    records.append(record)
        return records

    async def _broker_unfenced(self, broker_id: int) -> None:
        if not self._leads():
            return
        usable = self._usable() | {broker_id}
        records: list[Message] = []
        for meta in self._store.topics().values():
            for index, part in sorted(meta.partitions.items()):
                if part.leader != NO_LEADER:
                    continue
                record = self.change(meta, index, part, usable)
                if record is not None and record.leader not in (NO_CHANGE, NO_LEADER):
                    records.append(record)
        if records:
            await self._commit(records)
