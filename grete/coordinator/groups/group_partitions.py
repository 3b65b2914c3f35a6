"""Which ``__consumer_offsets`` partitions the group coordinator serves: Kafka's onElection (load a
partition's groups and offsets from the log) and onResignation (drop them), start-up and shutdown.

While a partition loads, its groups answer COORDINATOR_LOAD_IN_PROGRESS (``GroupContext.status_error``);
the log is replayed a chunk at a time so that other connections are served meanwhile. A resignation
that arrives during the load abandons it. Unloading answers the partition's parked JoinGroup and
SyncGroup requests NOT_COORDINATOR, cancels its timers and forgets its groups; clients then look up
the new coordinator.
"""

from __future__ import annotations

import asyncio

from grete.coordinator.groups.group_context import GroupContext, cancel, log
from grete.coordinator.groups.group_loader import build_groups, staged_offsets
from grete.coordinator.groups.group_membership import Membership
from grete.coordinator.groups.group_offsets import Offsets
from grete.coordinator.groups.group_state import Group
from grete.coordinator.groups.group_store import Record

NO_EPOCH = -1
# Records replayed between two yields to the event loop while a partition loads.
LOAD_CHUNK = 1000


class _Load:
    """One load in progress; a resignation (or a newer election) makes it stale."""

    __slots__ = ("epoch",)

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch


class GroupPartitions:
    def __init__(self, ctx: GroupContext, members: Membership, offsets: Offsets) -> None:
        self.ctx = ctx
        self.members = members
        self.offsets = offsets
        self._loads: dict[int, _Load] = {}
        self._retention_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------------- start-up

    def startup(self) -> None:
        """Kafka's GroupCoordinator.startup: requests are answered from now on (partitions not loaded
        here answer NOT_COORDINATOR) and offsets retention runs."""
        if not self.ctx.active:
            self.ctx.active = True
            self._schedule_retention()

    async def load_all(self) -> None:
        """A single node leads every partition: all are elected at once and loaded in turn."""
        partitions = range(self.ctx.config.offsets_topic_num_partitions)
        self.ctx.loading_partitions.update(p for p in partitions if p not in self.ctx.owned_partitions)
        self.startup()
        for partition in partitions:
            await self.load_partition(partition)
        log.info("loaded %d groups from __consumer_offsets", len(self.ctx.groups))

    # ----------------------------------------------------------------- election/resignation

    async def load_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        """Kafka's onElection: this broker leads ``partition`` of __consumer_offsets in leader epoch
        ``epoch``; its groups answer COORDINATOR_LOAD_IN_PROGRESS until rebuilt from the log. An
        election older than the one already seen, or for a partition already served, changes nothing."""
        self.startup()
        if epoch != NO_EPOCH and epoch < self.ctx.partition_epochs.get(partition, NO_EPOCH):
            log.info("ignoring election for __consumer_offsets-%d in stale epoch %d", partition, epoch)
            return
        self.ctx.partition_epochs[partition] = epoch
        if partition in self.ctx.owned_partitions or partition in self._loads:
            if partition in self._loads:
                self._loads[partition].epoch = epoch
            return
        load = self._loads[partition] = _Load(epoch)
        self.ctx.loading_partitions.add(partition)
        try:
            records = await self._read(partition, load)
            if records is None:
                return  # resigned while loading
            for group in build_groups(records, self.ctx.now_ms()):
                self._install(group)
            self._stage_open_transactions(self.ctx.store.open_transactions(partition))
            self.ctx.owned_partitions.add(partition)
            try:
                self.ctx.on_loaded(partition, records)
            except Exception:  # the other owner's trouble must not keep this partition's groups away
                log.exception("handing __consumer_offsets-%d's records over failed", partition)
        finally:
            if self._loads.get(partition) is load:
                del self._loads[partition]
                self.ctx.loading_partitions.discard(partition)

    async def _read(self, partition: int, load: _Load) -> list[Record] | None:
        """The partition's records, yielding to the loop every chunk; None if the load went stale."""
        records: list[Record] = []
        for record in self.ctx.store.read(partition):
            records.append(record)
            if len(records) % LOAD_CHUNK == 0:
                await asyncio.sleep(0)
                if self._loads.get(partition) is not load:
                    return None
        await asyncio.sleep(0)  # let other connections see LOAD_IN_PROGRESS meanwhile
        return records if self._loads.get(partition) is load else None

    def unload_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        """Kafka's onResignation: another broker leads ``partition`` now (a resignation older than
        the last election is ignored). Its groups are dropped: parked joins and syncs answered
        NOT_COORDINATOR, timers cancelled; their requests answer NOT_COORDINATOR from now on."""
        current = self.ctx.partition_epochs.get(partition, NO_EPOCH)
        if epoch != NO_EPOCH and current != NO_EPOCH and epoch < current:
            log.info("ignoring resignation of __consumer_offsets-%d in stale epoch %d", partition, epoch)
            return
        self._loads.pop(partition, None)
        self.ctx.partition_epochs.pop(partition, None)
        self.ctx.owned_partitions.discard(partition)
        self.ctx.loading_partitions.discard(partition)
        for group in self.ctx.groups_in(partition):
            self.members.unload_group(group)
            del self.ctx.groups[group.group_id]
        self.ctx.on_unloaded(partition)

    def _stage_open_transactions(self, open_txns: dict[int, list[Record]]) -> None:
        """Offsets of transactions without a marker yet wait in ``pending_txn_offsets`` for it."""
        for producer_id, records in open_txns.items():
            for group_id, offsets in staged_offsets(records).items():
                group = self.ctx.groups.get(group_id) or self.ctx.new_group(group_id)
                group.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def _install(self, group: Group) -> None:
        self.ctx.groups[group.group_id] = group
        # Restored members must keep heartbeating; those that are gone time out as usual.
        for member in group.members.values():
            self.members.schedule_session(group, member, member.session_timeout_ms)

    # ------------------------------------------------------------------------- shutdown

    async def shutdown(self) -> None:
        self.ctx.active = False
        cancel(self._retention_timer)
        self._retention_timer = None
        self._loads.clear()
        for group in self.ctx.groups.values():
            self.members.unload_group(group)
        self.ctx.owned_partitions.clear()
        self.ctx.loading_partitions.clear()
        await self.ctx.drain_tasks()

    # ------------------------------------------------------------------------ retention

    def _schedule_retention(self) -> None:
        cancel(self._retention_timer)
        self._retention_timer = self.ctx.call_later(self.ctx.config.offsets_retention_check_interval_ms,
                                                    self._on_retention_timer)

    def _on_retention_timer(self) -> None:
        if self.ctx.active:
            self.ctx.spawn(self.offsets.expire_offsets())
            self._schedule_retention()
