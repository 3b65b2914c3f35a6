"""The classic-protocol group coordinator: one per broker, asyncio, independent of the wire codecs.

Request handlers call the methods here with decoded fields and turn the results into responses:

* ``join_group`` / ``sync_group`` / ``heartbeat`` / ``leave_group``   (``group_membership``)
* ``commit_offsets`` / ``fetch_offsets`` / ``delete_offsets`` / ``delete_groups``   (``group_offsets``)
* ``describe_group`` / ``list_groups``   (here)

Lifecycle: ``await load()`` (or ``start()``, the same) loads every group and offset from ``__consumer_offsets`` (through the
``OffsetsStore``) and starts the retention timer; ``await shutdown()`` stops all timers and answers
any parked JoinGroup/SyncGroup with NOT_COORDINATOR. Until loading finishes, every API answers
COORDINATOR_NOT_AVAILABLE, and COORDINATOR_LOAD_IN_PROGRESS while loading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from grete.coordinator.group_base import CoordinatorBase, cancel, log, wall_clock_ms
from grete.coordinator.group_loader import build_groups, staged_offsets
from grete.coordinator.group_membership import Membership
from grete.coordinator.group_offsets import Offsets
from grete.coordinator.group_state import Group, GroupState
from grete.coordinator.group_store import OffsetsStore, Record
from grete.coordinator.group_types import (
    CLASSIC_GROUP_TYPE,
    GroupConfig,
    GroupDescription,
    GroupListing,
    JoinResult,
    MemberDescription,
    SyncResult,
)
from grete.protocol.errors import ErrorCode

__all__ = ["GroupCoordinator"]


class GroupCoordinator(CoordinatorBase):
    """The shared state (``CoordinatorBase``: config, clock, store, the group table, timers and
    writes) plus two parts that act on it: ``membership`` (JoinGroup, SyncGroup, Heartbeat,
    LeaveGroup, rebalances) and ``offsets`` (commits, fetches, deletions, retention). The request
    handlers call the methods below, which hand each request to its part."""

    def __init__(self, config: GroupConfig, store: OffsetsStore, *,
                 now_ms: Callable[[], int] = wall_clock_ms) -> None:
        super().__init__(config, store, now_ms=now_ms)
        self.membership = Membership(self)
        self.offsets = Offsets(self, self.membership)
        self._loaded = False
        self._retention_timer: asyncio.TimerHandle | None = None
        # The parts' request methods, as the handlers (and grete.testing) call them.
        self.join_group = self.membership.join_group
        self.sync_group = self.membership.sync_group
        self.heartbeat = self.membership.heartbeat
        self.leave_group = self.membership.leave_group
        self.touch_member = self.membership.touch_member
        self.validate_current_member = self.membership.validate_current_member
        self.remove_member_and_update_group = self.membership.remove_member_and_update_group
        self.commit_offsets = self.offsets.commit_offsets
        self.commit_txn_offsets = self.offsets.commit_txn_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.delete_groups = self.offsets.delete_groups
        self.expire_offsets = self.offsets.expire_offsets
        self.complete_txn = self.offsets.complete_txn

    # ============================================================================ lifecycle

    async def load(self) -> None:
        """Serve every ``__consumer_offsets`` partition (a single node leads them all): each is
        loaded in turn, then requests are served and the retention timer runs. ``start()`` is the
        same; either may be called."""
        partitions = range(self.config.offsets_topic_num_partitions)
        self.loading_partitions.update(partitions)  # elected for all: LOAD_IN_PROGRESS until loaded
        self._loading = True
        try:
            for partition in partitions:
                await self.load_partition(partition)
        finally:
            self._loading = False
        self._loaded = True
        self._active = True
        self._schedule_retention()
        log.info("loaded %d groups from __consumer_offsets", len(self.groups))

    async def load_partition(self, partition: int) -> None:
        """Kafka's onElection: this broker now leads ``partition`` of __consumer_offsets; its groups
        answer COORDINATOR_LOAD_IN_PROGRESS until they are rebuilt from the log."""
        self.loading_partitions.add(partition)
        try:
            for group in build_groups(self.store.read(partition), self.now_ms()):
                self._install(group)
            self._stage_open_transactions(self.store.open_transactions(partition))
            self.owned_partitions.add(partition)
        finally:
            self.loading_partitions.discard(partition)
        self._active = True
        await asyncio.sleep(0)  # let other connections get LOAD_IN_PROGRESS meanwhile

    def unload_partition(self, partition: int) -> None:
        """Kafka's onResignation: another broker leads ``partition`` now. Its groups are dropped
        (their parked joins and syncs answered NOT_COORDINATOR, their timers cancelled); their
        requests answer NOT_COORDINATOR and clients find the new coordinator."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        for group_id, group in list(self.groups.items()):
            if self.partition_for(group_id) == partition:
                self._unload(group)
                del self.groups[group_id]

    def _stage_open_transactions(self, open_txns: dict[int, list[Record]]) -> None:
        """Offsets of transactions without a marker yet wait in ``pending_txn_offsets`` for it."""
        for producer_id, records in open_txns.items():
            for group_id, offsets in staged_offsets(records).items():
                group = self.groups.get(group_id) or self.new_group(group_id)
                group.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def _install(self, group: Group) -> None:
        self.groups[group.group_id] = group
        # Restored members must keep heartbeating; those that are gone time out as usual.
        for member in group.members.values():
            self.membership._schedule_session(group, member, member.session_timeout_ms)

    async def start(self) -> None:
        if not self._loaded:
            await self.load()

    async def shutdown(self) -> None:
        self._active = False
        cancel(self._retention_timer)
        self._retention_timer = None
        for group in self.groups.values():
            self._unload(group)
        await self.drain_tasks()

    def _unload(self, group: Group) -> None:
        cancel(group.join_timer)
        cancel(group.sync_timer)
        group.join_timer = group.sync_timer = None
        for handle in group.pending_members.values():
            cancel(handle)
        for member in group.members.values():
            cancel(member.session_timer)
            member.session_timer = None
            group.complete_join(member, JoinResult.failed(member.member_id, ErrorCode.NOT_COORDINATOR))
            group.complete_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    def _schedule_retention(self) -> None:
        cancel(self._retention_timer)
        self._retention_timer = self.call_later(self.config.offsets_retention_check_interval_ms,
                                                self._on_retention_timer)

    def _on_retention_timer(self) -> None:
        if self._active:
            self.spawn(self.expire_offsets())
            self._schedule_retention()

    # =========================================================================== describing

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group. Member metadata and assignments are reported (byte for byte)
        only for a Stable group, as Kafka does."""
        error = self.status_error(group_id, allow_empty_id=True)
        if error is not None:
            return GroupDescription(group_id, error, "")
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return GroupDescription(group_id, ErrorCode.NONE, GroupState.DEAD.value, found=False)
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
        if self.availability_error() is ErrorCode.COORDINATOR_NOT_AVAILABLE:
            return []
        if types and CLASSIC_GROUP_TYPE not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states} if states else None
        return [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
                for g in self.groups.values()
                if not g.is_(GroupState.DEAD) and (wanted is None or g.state.value.lower() in wanted)]
