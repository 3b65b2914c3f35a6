"""OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups and offset retention.

Committed offsets live in ``group.offsets`` and, durably, as OffsetCommitKey/OffsetCommitValue records
in ``__consumer_offsets``; an offset changes in memory only after its record was appended, so a fetch
never returns an offset that a restart would lose.

Transactional commits (TxnOffsetCommit) are written as a transactional batch (the producer's id and
epoch) and staged in ``group.pending_txn_offsets[producer_id]``; the transaction coordinator's COMMIT
marker on the group's offsets partition moves them into ``group.offsets`` (``complete_txn``), an ABORT
drops them. Until then OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them, a
plain OffsetFetch returns the previous offset, and retention skips them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from grete.coordinator.groups.consumer_records import tombstones
from grete.coordinator.groups.consumer_requests import validate_commit
from grete.coordinator.groups.group_context import OFFSET_WRITE_ERRORS, GroupContext, log
from grete.coordinator.groups.group_membership import Membership
from grete.coordinator.groups.group_state import CommittedOffset, Group, GroupState, TopicPartition
from grete.coordinator.groups.group_store import Record
from grete.coordinator.groups.group_types import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    UNKNOWN_MEMBER_ID,
    OffsetAndMetadata,
    OffsetCommit,
)
from grete.coordinator.groups.offsets_format import (
    OffsetValue,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from grete.coordinator.groups.streams_records import tombstones as streams_tombstones
from grete.coordinator.groups.streams_state import validate_commit as validate_streams_commit
from grete.protocol.errors import ErrorCode

NO_RETENTION = -1  # OffsetCommit v2-v4 retention_time_ms default: use the broker's retention


class Offsets:
    """Committed offsets over the shared ``GroupContext``; commits from members are signs of life,
    which ``members`` turns into session timer restarts."""

    def __init__(self, ctx: GroupContext, members: Membership) -> None:
        self.ctx = ctx
        self.members = members

    # ========================================================================= OffsetCommit

    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None, retention_ms: int,
                             offsets: list[OffsetCommit], api_version: int | None = None
                             ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit. Generation -1 with an empty member id is a simple (standalone) commit, allowed
        only while the group has no members. ``retention_ms`` is v2-v4's retention_time_ms; -1 (and
        every other version) means offsets.retention.minutes applies."""
        tps = [(c.topic, c.partition) for c in offsets]
        error = self.ctx.status_error(group_id, allow_empty_id=True)
        if error is not None:
            return dict.fromkeys(tps, error)
        group = self.ctx.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Either a stale member of a group that no longer exists or a bogus generation.
                return dict.fromkeys(tps, ErrorCode.ILLEGAL_GENERATION)
            group = self.ctx.new_group(group_id)
        if group.consumer is not None:
            error = validate_commit(group.consumer, member_id, generation_id, api_version)
        elif group.streams is not None:
            error = validate_streams_commit(group.streams, member_id, generation_id, transactional=False)
        else:
            error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(tps, error)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return dict.fromkeys(tps, ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self.members.touch_member(group, member_id)
        return await self.ctx.detached(self._store_offsets(group, offsets, retention_ms))

    def _validate_offset_commit(self, group: Group, generation_id: int, member_id: str,
                                instance_id: str | None) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit: an Empty group takes a commit without a
        generation whatever member it names (a manually assigned KIP-848 consumer names the id it
        made up); once a generation is named the member must be current; without one a group with
        members refuses it."""
        error = self._validate_txn_offset_commit(group, generation_id, member_id, instance_id)
        if error is None and generation_id < 0 and member_id == UNKNOWN_MEMBER_ID and instance_id is None \
                and not group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members may commit for a group with members
        return error

    async def _store_offsets(self, group: Group, offsets: list[OffsetCommit], retention_ms: int, *,
                             producer: tuple[int, int] | None = None) -> dict[TopicPartition, ErrorCode]:
        """Write the commits as one batch; apply them, or, for a transaction's ``producer`` (id,
        epoch), stage them until its marker."""
        now = self.ctx.now_ms()
        expire = now + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for commit in offsets:
            tp = (commit.topic, commit.partition)
            metadata = commit.metadata or ""
            if len(metadata) > self.ctx.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                committed_at = now if commit.commit_timestamp == -1 else commit.commit_timestamp
                accepted[tp] = CommittedOffset(commit.offset, commit.leader_epoch, metadata, committed_at, expire)
        if not accepted:
            return results
        records: list[Record] = [
            (encode_offset_key(group.group_id, topic, partition),
             encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata, c.commit_timestamp,
                                             c.expire_timestamp)))
            for (topic, partition), c in accepted.items()]
        partition = self.ctx.partition_for(group.group_id)
        if producer is None:
            error = await self.ctx.append(partition, records, OFFSET_WRITE_ERRORS)
            if error is ErrorCode.NONE and self.ctx.live_group(group):
                group.offsets.update(accepted)
        else:
            error = await self.ctx.append_txn(partition, records, *producer)
            if error is ErrorCode.NONE and self.ctx.live_group(group):
                group.pending_txn_offsets.setdefault(producer[0], {}).update(accepted)
        results.update(dict.fromkeys(accepted, error))
        return results

    # ===================================================================== TxnOffsetCommit

    async def commit_txn_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                 generation_id: int, member_id: str, group_instance_id: str | None,
                                 offsets: list[OffsetCommit]) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: like OffsetCommit, but the offsets take effect with the transaction's COMMIT
        marker. A group that does not exist is created (Kafka does the same: a simple consumer may
        commit transactionally); member checks apply when the request names a member (v3+)."""
        tps = [(c.topic, c.partition) for c in offsets]
        error = self.ctx.status_error(group_id)
        if error is not None:
            return dict.fromkeys(tps, error)
        group = self.ctx.groups.get(group_id) or self.ctx.new_group(group_id)
        if group.consumer is not None and (generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID):
            error = validate_commit(group.consumer, member_id, generation_id, None, transactional=True)
        elif group.streams is not None and (generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID):
            error = validate_streams_commit(group.streams, member_id, generation_id, transactional=True)
        else:
            error = self._validate_txn_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(tps, error)
        return await self.ctx.detached(self._store_offsets(group, offsets, NO_RETENTION,
                                                       producer=(producer_id, producer_epoch)))

    def _validate_txn_offset_commit(self, group: Group, generation_id: int, member_id: str,
                                    instance_id: str | None) -> ErrorCode | None:
        """Kafka's checks (as its KRaft-mode coordinator makes them, measured on 3.9 and 4.3): an Empty
        group takes commits without a generation from anyone; once a generation or member is named
        it must be current; a transactional commit without one is accepted even with members."""
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            error = self.members.validate_current_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        return None

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """The transaction marker of ``producer_id`` was written to ``offsets_partition``."""
        for group in self.ctx.groups.values():
            staged = group.pending_txn_offsets.pop(producer_id, None)
            if staged is None or self.ctx.partition_for(group.group_id) != offsets_partition:
                if staged is not None:
                    group.pending_txn_offsets[producer_id] = staged
                continue
            if commit and not group.is_(GroupState.DEAD):
                group.offsets.update(staged)

    # ========================================================================== OffsetFetch

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool = False
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata]]:
        """OffsetFetch, whatever the group's state (simple consumers have no members). Partitions
        without a committed offset answer offset -1; ``partitions=None`` means all committed ones."""
        error = self.ctx.status_error(group_id, allow_empty_id=True)
        if error is not None:
            return error, {}
        group = self.ctx.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.NONE, {tp: OffsetAndMetadata(NO_OFFSET) for tp in partitions or []}
        wanted = list(group.offsets) if partitions is None else partitions
        return ErrorCode.NONE, {tp: self._fetch_one(group, tp, require_stable) for tp in wanted}

    @staticmethod
    def _fetch_one(group: Group, tp: TopicPartition, require_stable: bool) -> OffsetAndMetadata:
        if require_stable and group.has_pending_offset_commit(tp):
            return OffsetAndMetadata(NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        committed = group.offsets.get(tp)
        if committed is None:
            return OffsetAndMetadata(NO_OFFSET)
        return OffsetAndMetadata(committed.offset, committed.leader_epoch, committed.metadata)

    # ========================================================================= OffsetDelete

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496): allowed for an Empty group, and for a consumer group with members
        only on topics none of them subscribes to (others get GROUP_SUBSCRIBED_TO_TOPIC)."""
        error = self.ctx.status_error(group_id)
        if error is not None:
            return error, {}
        group = self.ctx.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if group.consumer is not None and group.consumer.members:
            subscribed = group.consumer.subscribed
            eligible = [tp for tp in partitions if tp[0] not in subscribed]
            results.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp[0] in subscribed})
        elif group.streams is not None and group.streams.members:
            # A streams group's members read the topology's input topics (source and repartition).
            topology = group.streams.topology
            inputs = {t for sub in topology.subtopologies for t in sub.inputs()} if topology is not None else set()
            eligible = [tp for tp in partitions if tp[0] not in inputs]
            results.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp[0] in inputs})
        elif group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group():
            eligible = [tp for tp in partitions if not group.is_subscribed_to(tp[0])]
            results.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions
                            if group.is_subscribed_to(tp[0])})
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            await self.ctx.detached(self._cleanup([(group, eligible)]))
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
        return ErrorCode.NONE, results

    # ========================================================================= DeleteGroups

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        doomed: list[tuple[Group, list[TopicPartition]]] = []
        for group_id in group_ids:
            error = self.ctx.status_error(group_id, allow_empty_id=True)
            group = self.ctx.groups.get(group_id)
            if error is not None:
                results[group_id] = error
            elif group is None or group.is_(GroupState.DEAD):
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(GroupState.EMPTY) or group.has_consumer_members():
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                group.transition_to(GroupState.DEAD, self.ctx.now_ms())
                doomed.append((group, list(group.offsets)))
                results[group_id] = ErrorCode.NONE
        if doomed:
            await self.ctx.detached(self._cleanup(doomed))
        return results

    # ============================================================================ retention

    async def expire_offsets(self) -> int:
        """One pass of offsets.retention: drop expired offsets, and groups left Empty without any."""
        now = self.ctx.now_ms()
        work = [(g, g.expired_offsets(now, self.ctx.config.offsets_retention_ms)) for g in list(self.ctx.groups.values())]
        return await self._cleanup([(g, tps) for g, tps in work if tps or self._is_husk(g)])

    @staticmethod
    def _is_husk(group: Group) -> bool:
        return (group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_members
                and not group.has_consumer_members())

    async def _cleanup(self, work: list[tuple[Group, list[TopicPartition]]]) -> int:
        """Remove the offsets in memory at once, then write their tombstones (and the group's, for
        groups that end up Dead). Like Kafka, a failed tombstone write is only logged: the offsets
        would come back after a restart and expire again."""
        by_partition: dict[int, list[Record]] = defaultdict(list)
        removed = 0
        for group, tps in work:
            for tp in tps:
                if group.offsets.pop(tp, None) is not None:
                    removed += 1
                    by_partition[self.ctx.partition_for(group.group_id)].append(
                        (encode_offset_key(group.group_id, tp[0], tp[1]), None))
            if self._is_husk(group):
                group.transition_to(GroupState.DEAD, self.ctx.now_ms())
            if group.is_(GroupState.DEAD):
                if self.ctx.groups.get(group.group_id) is group:
                    del self.ctx.groups[group.group_id]
                log.info("group %s is dead (generation %d)", group.group_id, group.generation_id)
                by_partition[self.ctx.partition_for(group.group_id)].append((encode_group_key(group.group_id), None))
                if group.consumer is not None:
                    by_partition[self.ctx.partition_for(group.group_id)].extend(tombstones(group.consumer))
                if group.streams is not None:
                    by_partition[self.ctx.partition_for(group.group_id)].extend(streams_tombstones(group.streams))
        for partition, records in by_partition.items():
            error = await self.ctx.append(partition, records, OFFSET_WRITE_ERRORS)
            if error is not ErrorCode.NONE:
                log.warning("could not write %d tombstones to __consumer_offsets-%d: %s",
                            len(records), partition, error.name)
        return removed
