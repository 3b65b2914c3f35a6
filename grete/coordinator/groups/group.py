"""The classic-protocol group coordinator: one per broker, asyncio, independent of the wire codecs.

Request handlers call the methods here with decoded fields and turn the results into responses:

* ``join_group`` / ``sync_group`` / ``heartbeat`` / ``leave_group``   (``Membership``, group_membership)
* ``commit_offsets`` / ``commit_txn_offsets`` / ``fetch_offsets`` / ``delete_offsets`` / ``delete_groups`` /
  ``complete_txn``   (``Offsets``, group_offsets)
* ``describe_group`` / ``list_groups``   (here)

The parts share one ``GroupContext`` (group_context); this class only builds them and forwards.

Lifecycle (``GroupPartitions``, group_partitions): in a cluster, ``await load_partition(p, epoch)`` and
``unload_partition(p)`` follow the leadership of ``__consumer_offsets`` partitions (Kafka's onElection /
onResignation); a group whose partition is loading answers COORDINATOR_LOAD_IN_PROGRESS, one whose
partition is not served here NOT_COORDINATOR. On a single node ``await load()`` (or ``start()``, the
same) loads every partition. ``await shutdown()`` stops all timers and answers any parked
JoinGroup/SyncGroup with NOT_COORDINATOR; before start-up and after shutdown every API answers
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TypeVar

from grete.coordinator.groups.consumer_assignors import TopicView
from grete.coordinator.groups.consumer_classic import ClassicMembers
from grete.coordinator.groups.consumer_groups import ConsumerGroups
from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat, HeartbeatResult
from grete.coordinator.groups.consumer_state import ConsumerGroup
from grete.coordinator.groups.group_context import GroupContext, wall_clock_ms
from grete.coordinator.groups.group_membership import Membership, Protocols
from grete.coordinator.groups.group_offsets import Offsets
from grete.coordinator.groups.group_partitions import NO_EPOCH, GroupPartitions
from grete.coordinator.groups.group_state import Group, GroupState, Member, TopicPartition
from grete.coordinator.groups.group_store import OffsetsStore, Record
from grete.coordinator.groups.group_types import (
    CLASSIC_GROUP_TYPE,
    CONSUMER_GROUP_TYPE,
    STREAMS_GROUP_TYPE,
    GroupConfig,
    GroupDescription,
    GroupListing,
    JoinResult,
    LeaveMember,
    MemberDescription,
    OffsetAndMetadata,
    OffsetCommit,
    SyncResult,
)
from grete.coordinator.groups.streams_groups import StreamsGroups
from grete.coordinator.groups.streams_requests import StreamsHeartbeat, StreamsResult
from grete.coordinator.groups.streams_state import StreamsGroup
from grete.protocol.errors import ErrorCode

__all__ = ["GroupCoordinator"]

T = TypeVar("T")


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: OffsetsStore, *,
                 now_ms: Callable[[], int] = wall_clock_ms,
                 topic_view: Callable[[], TopicView] | None = None,
                 group_overrides: Callable[[str], Mapping[str, str]] | None = None) -> None:
        self.ctx = GroupContext(config, store, now_ms)
        if topic_view is not None:
            self.ctx.topic_view = topic_view
        if group_overrides is not None:
            self.ctx.group_overrides = group_overrides
        self.membership = Membership(self.ctx)
        self.consumer = ConsumerGroups(self.ctx)
        self.streams = StreamsGroups(self.ctx)
        self.classic_in_consumer = ClassicMembers(self.ctx, self.consumer, self.membership)
        self.offsets = Offsets(self.ctx, self.membership)
        self.partitions = GroupPartitions(self.ctx, self.membership, self.offsets)
        self._loaded = False

    # ======================================================================== shared state

    @property
    def config(self) -> GroupConfig:
        return self.ctx.config

    @property
    def store(self) -> OffsetsStore:
        return self.ctx.store

    @property
    def groups(self) -> dict[str, Group]:
        return self.ctx.groups

    @property
    def owned_partitions(self) -> set[int]:
        return self.ctx.owned_partitions

    @property
    def loading_partitions(self) -> set[int]:
        return self.ctx.loading_partitions

    def now_ms(self) -> int:
        return self.ctx.now_ms()

    def partition_for(self, group_id: str) -> int:
        return self.ctx.partition_for(group_id)

    def availability_error(self) -> ErrorCode:
        return self.ctx.availability_error()

    def status_error(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode | None:
        return self.ctx.status_error(group_id, allow_empty_id=allow_empty_id)

    def hand_over(self, loaded: Callable[[int, list[Record]], None], unloaded: Callable[[int], None]) -> None:
        """Another owner of records in ``__consumer_offsets`` (share groups): ``loaded(partition,
        records)`` once a partition is loaded here, ``unloaded(partition)`` when it moves away."""
        self.ctx.on_loaded, self.ctx.on_unloaded = loaded, unloaded

    async def append_in_order(self, partition: int, records: list[Record]) -> ErrorCode:
        return await self.ctx.append_in_order(partition, records)

    async def detached(self, coro: Coroutine[object, None, T]) -> T:
        return await self.ctx.detached(coro)

    def spawn(self, coro: Coroutine[object, None, T]) -> asyncio.Task[T]:
        return self.ctx.spawn(coro)

    # ============================================================================ lifecycle

    async def load(self) -> None:
        """Serve every ``__consumer_offsets`` partition (a single node leads them all)."""
        await self.partitions.load_all()
        self.consumer.arm_loaded(list(self.ctx.groups.values()))
        self.streams.arm_loaded(list(self.ctx.groups.values()))
        self._loaded = True

    async def start(self) -> None:
        if not self._loaded:
            await self.load()

    def startup(self) -> None:
        """Kafka's GroupCoordinator.startup in a cluster, at the broker's start: requests are answered
        from now on (ListGroups with the groups of the partitions loaded here, none yet; a group of a
        partition led elsewhere NOT_COORDINATOR), whether or not this broker leads any partition."""
        self.partitions.startup()

    async def load_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        await self.partitions.load_partition(partition, epoch)
        self.consumer.arm_loaded(self.ctx.groups_in(partition))
        self.streams.arm_loaded(self.ctx.groups_in(partition))

    def unload_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        self.partitions.unload_partition(partition, epoch)

    async def shutdown(self) -> None:
        await self.partitions.shutdown()

    # ========================================================================== membership

    async def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                         client_id: str, client_host: str, session_timeout_ms: int,
                         rebalance_timeout_ms: int, protocol_type: str, protocols: Protocols,
                         require_known_member_id: bool, reason: str | None,
                         supports_skip_assignment: bool = False) -> JoinResult:
        existing = self.ctx.groups.get(group_id)
        if existing is not None and existing.streams is not None and self.ctx.status_error(group_id) is None:
            # Kafka answers a classic JoinGroup for a group of another type (streams, share) so.
            return JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None and consumer_group.consumer is not None and consumer_group.consumer.members \
                and self.config.consumer_migration_policy != "disabled":
            if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                    <= self.config.group_max_session_timeout_ms):
                return JoinResult.failed(member_id, ErrorCode.INVALID_SESSION_TIMEOUT)
            return await self.classic_in_consumer.join(
                consumer_group, member_id=member_id, instance_id=group_instance_id, client_id=client_id,
                client_host=client_host, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                require_known_member_id=require_known_member_id)
        return await self.membership.join_group(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
            client_host=client_host, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
            require_known_member_id=require_known_member_id, reason=reason,
            supports_skip_assignment=supports_skip_assignment)

    async def sync_group(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            return self.classic_in_consumer.sync(consumer_group, generation_id=generation_id, member_id=member_id,
                                                 instance_id=group_instance_id, protocol_type=protocol_type,
                                                 protocol_name=protocol_name)
        return await self.membership.sync_group(
            group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=assignments)

    async def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None) -> ErrorCode:
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            return self.classic_in_consumer.heartbeat(consumer_group, generation_id=generation_id,
                                                      member_id=member_id, instance_id=group_instance_id)
        return await self.membership.heartbeat(group_id=group_id, generation_id=generation_id,
                                               member_id=member_id, group_instance_id=group_instance_id)

    async def leave_group(self, *, group_id: str,
                          members: list[LeaveMember]) -> tuple[ErrorCode, list[tuple[LeaveMember, ErrorCode]]]:
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            return ErrorCode.NONE, await self.classic_in_consumer.leave(consumer_group, members)
        return await self.membership.leave_group(group_id=group_id, members=members)

    def _consumer_group(self, group_id: str) -> Group | None:
        """The group, if it is a consumer group served here: classic APIs then act on its members."""
        group = self.ctx.groups.get(group_id)
        if group is None or group.consumer is None or self.ctx.status_error(group_id) is not None:
            return None
        return group

    def remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        """As if the member's session expired (grete.testing uses it to expire a member now)."""
        self.membership.remove_member_and_update_group(group, member, reason)

    # ==================================================== KIP-848 consumer groups (consumer_groups)

    async def consumer_group_heartbeat(self, request: ConsumerHeartbeat) -> HeartbeatResult:
        return await self.consumer.heartbeat(request)

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        return self.consumer.describe(group_id)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        group = self.ctx.groups.get(group_id)
        if group is None:
            return None
        kind = self.streams if group.streams is not None else self.consumer
        return kind.validate_fetch(group, member_id, member_epoch)

    # ===================================================== KIP-1071 streams groups (streams_groups)

    async def streams_group_heartbeat(self, request: StreamsHeartbeat) -> StreamsResult:
        return await self.streams.heartbeat(request)

    def describe_streams_group(self, group_id: str) -> tuple[ErrorCode, str | None, StreamsGroup | None]:
        return self.streams.describe(group_id)

    # ============================================================================= offsets

    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None, retention_ms: int,
                             offsets: list[OffsetCommit], api_version: int | None = None
                             ) -> dict[TopicPartition, ErrorCode]:
        """``api_version`` is OffsetCommit's (None: the newest); members of consumer groups need v9+."""
        return await self.offsets.commit_offsets(
            group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, retention_ms=retention_ms, offsets=offsets,
            api_version=api_version)

    async def commit_txn_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                 generation_id: int, member_id: str, group_instance_id: str | None,
                                 offsets: list[OffsetCommit]) -> dict[TopicPartition, ErrorCode]:
        return await self.offsets.commit_txn_offsets(
            group_id=group_id, producer_id=producer_id, producer_epoch=producer_epoch,
            generation_id=generation_id, member_id=member_id, group_instance_id=group_instance_id,
            offsets=offsets)

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        self.offsets.complete_txn(offsets_partition, producer_id, commit)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool = False
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata]]:
        return self.offsets.fetch_offsets(group_id, partitions, require_stable)

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return await self.offsets.delete_offsets(group_id, partitions)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        return await self.offsets.delete_groups(group_ids)

    async def expire_offsets(self) -> int:
        return await self.offsets.expire_offsets()

    # =========================================================================== describing

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group. Member metadata and assignments are reported (byte for byte)
        only for a Stable group, as Kafka does."""
        error = self.ctx.status_error(group_id, allow_empty_id=True)
        if error is not None:
            return GroupDescription(group_id, error, "")
        group = self.ctx.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD) or group.consumer is not None or group.streams is not None:
            # A consumer or streams group is not a classic group: Kafka answers it as Dead (not found).
            why = (f"Group {group_id} not found." if group is None or group.is_(GroupState.DEAD)
                   else f"Group {group_id} is not a classic group.")
            return GroupDescription(group_id, ErrorCode.NONE, GroupState.DEAD.value, found=False, not_found=why)
        stable = group.is_(GroupState.STABLE) and group.protocol_name is not None
        members = [
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                              m.assignment if stable else b"")
            for m in group.members.values()]
        return GroupDescription(group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None) -> list[GroupListing]:
        """ListGroups. Empty or None filters match everything; names compare case-insensitively.
        Handlers report ``availability_error()`` as the response's error code."""
        if self.ctx.availability_error() is ErrorCode.COORDINATOR_NOT_AVAILABLE:
            return []
        kinds = {t.lower() for t in types} if types else {CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE, STREAMS_GROUP_TYPE}
        wanted = {s.lower() for s in states} if states else None
        listed = []
        for g in self.ctx.groups.values():
            if g.is_(GroupState.DEAD):
                continue
            if g.consumer is not None:
                entry = GroupListing(g.group_id, CONSUMER_GROUP_TYPE, g.consumer.state_name(), CONSUMER_GROUP_TYPE)
            elif g.streams is not None:
                entry = GroupListing(g.group_id, STREAMS_GROUP_TYPE, g.streams.state_name(), STREAMS_GROUP_TYPE)
            else:
                entry = GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            if entry.group_type in kinds and (wanted is None or entry.state.lower() in wanted):
                listed.append(entry)
        return listed
