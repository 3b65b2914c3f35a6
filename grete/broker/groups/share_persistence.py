"""Share partitions' durable state: read from the share coordinator of each share partition (this
node's own on a single node, grete.broker.groups.share_coordinator.LocalSharePersister; in a cluster wherever
it is, grete.broker.cluster.share_persister) the first time it is used in a leader epoch of its
partition (``prepare``), and each change written to it in order (``flushed`` waits for them)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from grete.broker.groups.share_sessions import PartitionKey
from grete.broker.groups.share_settings import ShareSettings
from grete.broker.replica.partition import Partition
from grete.coordinator.share.share_format import ShareKey, ShareState, StateBatch
from grete.coordinator.share.share_partition import SharePartition
from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

ShareTopicPartition = tuple[str, uuid.UUID, int]  # (group id, topic id, partition index)


class Persister(Protocol):
    """A cluster's way to the share coordinators (grete.broker.cluster.share_persister)."""

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None: ...

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> None: ...

    async def delete(self, key: ShareKey) -> None: ...

    async def summary(self, key: ShareKey) -> tuple[int, int, int] | None: ...

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None: ...

    async def end_offset(self, topic: str, index: int) -> int | None: ...


@dataclass(slots=True)
class Flush:
    """Writes of one share partition's state to its coordinator: one at a time, each of the whole
    state as it is when sent, so a write covers every change counted before it."""
    wanted: int = 0
    written: int = 0
    running: bool = False
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)


class SharePersistence:
    def __init__(self, settings: ShareSettings, partitions: dict[ShareTopicPartition, SharePartition],
                 resolve: Callable[[PartitionKey], Partition],
                 cancel_lock_timer: Callable[[ShareTopicPartition], None]) -> None:
        self.settings = settings
        self.partitions = partitions  # the share partitions in memory here (ShareGroups')
        self.resolve = resolve
        self._cancel_lock_timer = cancel_lock_timer
        self.persister: Persister | None = None  # set by the broker (single node) or zk_broker (cluster)
        self.prepared: dict[ShareTopicPartition, int] = {}  # share partition -> leader epoch read in
        self._loading: dict[ShareTopicPartition, asyncio.Future[None]] = {}
        self.flushes: dict[ShareTopicPartition, Flush] = {}
        # every share partition each group has had here, cached or not (the offsets APIs, DeleteGroups)
        self.held: dict[str, set[PartitionKey]] = {}

    def load(self, states: dict[ShareKey, ShareState]) -> int:
        """A single node's start-up: its share partitions from its own share coordinator (so that the
        offsets APIs know them before a member comes back); how many."""
        for key, state in states.items():
            try:
                partition = self.resolve((key.topic_id, key.partition))
            except KafkaError:
                continue  # the topic is gone
            tkey = (key.group_id, key.topic_id, key.partition)
            self.partitions[tkey] = self._restored(key.group_id, state)
            self.prepared[tkey] = partition.leader_epoch
            self.held.setdefault(key.group_id, set()).add((key.topic_id, key.partition))
        return len(self.partitions)

    def _restored(self, group_id: str, state: ShareState) -> SharePartition:
        sp = SharePartition.restore(
            state.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                 for b in state.batches],
            self.settings.group_int(group_id, "share.delivery.count.limit", "group.share.delivery.count.limit"),
            self.settings.group_int(group_id, "share.partition.max.record.locks", "group.share.partition.max.record.locks"))
        sp.state_epoch = state.state_epoch
        return sp

    def persist(self, group_id: str, key: PartitionKey, sp: SharePartition) -> None:
        if self.persister is not None:
            self._schedule_write(group_id, key)

    async def prepare(self, group_id: str, key: PartitionKey) -> None:
        """The share partition as its coordinator has it, read once per leader epoch of the partition
        (a new leader starts where the old one's last write left it); a share partition never written
        is initialized there first (``share.auto.offset.reset``)."""
        if self.persister is None:
            return
        partition = self.resolve(key)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        tkey = (group_id, *key)
        if self.prepared.get(tkey) == partition.leader_epoch and tkey in self.partitions:
            return
        pending = self._loading.get(tkey)
        if pending is None:
            pending = self._loading[tkey] = asyncio.ensure_future(self._read(group_id, key, partition))
            pending.add_done_callback(lambda _f: self._loading.pop(tkey, None))
        await asyncio.shield(pending)

    async def _read(self, group_id: str, key: PartitionKey, partition: Partition) -> None:
        assert self.persister is not None
        epoch, share_key = partition.leader_epoch, ShareKey(group_id, *key)
        state = await self.persister.read(share_key, epoch)
        if state is None or state.start_offset < 0:
            start = self.settings.initial_offset(group_id, partition)
            await self.persister.write(share_key, 0, epoch, start, [])
            sp = SharePartition(start, self.settings.group_int(group_id, "share.delivery.count.limit",
                                                               "group.share.delivery.count.limit"),
                                self.settings.group_int(group_id, "share.partition.max.record.locks",
                                                        "group.share.partition.max.record.locks"))
        else:
            sp = self._restored(group_id, state)
        self._cancel_lock_timer((group_id, *key))
        self.partitions[(group_id, *key)] = sp
        self.prepared[(group_id, *key)] = epoch
        self.held.setdefault(group_id, set()).add(key)

    async def forget(self, key: ShareKey) -> None:
        """The coordinator's state of a share partition the group no longer has (a tombstone)."""
        assert self.persister is not None
        try:
            await self.persister.delete(key)
        except KafkaError as exc:
            log.warning("share state of %s not deleted: %s", key, exc)

    def _schedule_write(self, group_id: str, key: PartitionKey) -> None:
        tkey = (group_id, *key)
        flush = self.flushes.setdefault(tkey, Flush())
        flush.wanted += 1
        if not flush.running:
            flush.running = True
            asyncio.ensure_future(self._write_loop(tkey, flush))

    async def _write_loop(self, tkey: tuple[str, uuid.UUID, int], flush: Flush) -> None:
        assert self.persister is not None
        try:
            while flush.written < flush.wanted:
                target = flush.wanted
                sp = self.partitions.get(tkey)
                error = ErrorCode.NONE
                if sp is not None:
                    try:
                        await self.persister.write(ShareKey(*tkey), sp.state_epoch, self.prepared.get(tkey, -1),
                                                   sp.start, [StateBatch(*b) for b in sp.state_batches()])
                    except KafkaError as exc:
                        error = exc.code
                        # altered meanwhile, or another broker leads the partition now: read it again
                        if error in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
                            self.partitions.pop(tkey, None)
                            self.prepared.pop(tkey, None)
                flush.written = target
                done = [w for w in flush.waiters if w[0] <= target]
                flush.waiters = [w for w in flush.waiters if w[0] > target]
                for _, future in done:
                    if not future.done():
                        future.set_result(error)
        finally:
            flush.running = False

    async def flushed(self, group_id: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        """Once every change made so far to these share partitions is with their coordinators: the
        error of each write that failed."""
        waits: dict[PartitionKey, asyncio.Future[ErrorCode]] = {}
        for key in keys:
            flush = self.flushes.get((group_id, *key))
            if flush is not None and flush.written < flush.wanted:
                future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
                flush.waiters.append((flush.wanted, future))
                waits[key] = future
        return {key: await future for key, future in waits.items()}

    def drop(self, tkey: tuple[str, uuid.UUID, int]) -> None:
        self.partitions.pop(tkey, None)
        self.prepared.pop(tkey, None)
        self._cancel_lock_timer(tkey)
        flush = self.flushes.get(tkey)
        if flush is not None and not flush.running:
            del self.flushes[tkey]
