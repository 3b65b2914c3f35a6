"""The share coordinator (KIP-932) on this broker: the durable state of the share partitions whose keys
hash to the ``__share_group_state`` partitions this broker leads, as Kafka's ShareCoordinatorShard
keeps it. Share-partition leaders read and write it with Read/Write/Initialize/DeleteShareGroupState
and ReadShareGroupStateSummary (handlers/*_share_group_state*.py), over the inter-broker channel when
the coordinator is another broker (grete.broker.share_persister).

A write is appended as a ShareUpdate (its batches laid over the state, its start offset the new one),
every ``share.coordinator.snapshot.update.records.per.snapshot`` updates as a ShareSnapshot of the
whole state, and answered once the ISR has it (acks=all, as Kafka's coordinator runtime writes), so a
leader change of the state partition loses no acknowledged state. A state partition's states are
loaded from its log (up to its end: records of the previous leader's term are in it) the first time
this broker is asked about it in a leader epoch. The records before the oldest snapshot a live key
still needs are deleted after each snapshot (the topic is not compacted, as in Kafka). Writes and reads carry the share partition's leader
epoch: an older one than the coordinator has seen is FENCED_LEADER_EPOCH, so a deposed share-partition
leader cannot overwrite its successor's state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from grete.broker.config import BrokerConfig
from grete.broker.groups.share_store import overlay, prune, read_states
from grete.broker.replica.partition import Partition
from grete.broker.replica.replica_manager import ReplicaManager
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.share.share_format import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareState,
    StateBatch,
    encode_key,
    encode_value,
    partition_for,
)
from grete.coordinator.share.share_partition import ACKNOWLEDGED, ARCHIVED
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC

UNINITIALIZED = -1


@dataclass(slots=True)
class Shard:
    """One ``__share_group_state`` partition's states, loaded in one leader epoch of it."""
    leader_epoch: int
    states: dict[ShareKey, ShareState]
    updates: dict[ShareKey, int] = field(default_factory=dict)  # ShareUpdates since the last snapshot
    snapshots: dict[ShareKey, int] = field(default_factory=dict)  # offset of each live key's newest snapshot
    leader_epochs: dict[ShareKey, int] = field(default_factory=dict)  # the newest share-partition leader's


@dataclass(frozen=True, slots=True)
class Summary:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


class ShareCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager) -> None:
        self.config = config
        self.replicas = replicas
        self._shards: dict[int, Shard] = {}

    @property
    def partitions(self) -> int:
        return self.config.get_int("share.coordinator.state.topic.num.partitions")

    def _shard(self, key: ShareKey) -> tuple[Partition, Shard]:
        index = partition_for(key, self.partitions)
        try:
            partition = self.replicas.partition(SHARE_GROUP_STATE_TOPIC, index)
        except KafkaError:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{SHARE_GROUP_STATE_TOPIC}-{index} is not here") from None
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"this broker does not lead {SHARE_GROUP_STATE_TOPIC}-{index}")
        return partition, self._shard_at(index, partition)

    def _shard_at(self, index: int, partition: Partition) -> Shard:
        shard = self._shards.get(index)
        if shard is None or shard.leader_epoch != partition.leader_epoch:
            snapshots: dict[ShareKey, int] = {}
            states = read_states(partition.batches(partition.log_start_offset, partition.log_end_offset), snapshots)
            # The leader epochs written with the states fence older share-partition leaders after a move too.
            shard = self._shards[index] = Shard(partition.leader_epoch, states, snapshots=snapshots,
                                                leader_epochs={k: s.leader_epoch for k, s in states.items()})
        return shard

    def _fence(self, shard: Shard, key: ShareKey, leader_epoch: int) -> None:
        if leader_epoch < shard.leader_epochs.get(key, -1):
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {leader_epoch} is older than {shard.leader_epochs[key]}")
        shard.leader_epochs[key] = leader_epoch

    def local_states(self) -> dict[ShareKey, ShareState]:
        """Every state in the ``__share_group_state`` partitions this broker leads (a single node's
        start-up: its share partitions are known before any member comes back)."""
        states: dict[ShareKey, ShareState] = {}
        for index in range(self.partitions):
            try:
                partition = self.replicas.partition(SHARE_GROUP_STATE_TOPIC, index)
            except KafkaError:
                continue
            if partition.is_leader:
                states.update(self._shard_at(index, partition).states)
        return states

    # --- the inter-broker APIs' semantics ------------------------------------------------------------
    def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        """The state a new share-partition leader starts from; None if it was never initialized."""
        _, shard = self._shard(key)
        self._fence(shard, key, leader_epoch)
        return shard.states.get(key)

    def summary(self, key: ShareKey) -> Summary | None:
        _, shard = self._shard(key)
        state = shard.states.get(key)
        if state is None:
            return None
        complete = sum(b.last_offset - b.first_offset + 1 for b in state.batches
                       if b.delivery_state in (ACKNOWLEDGED, ARCHIVED) and b.last_offset >= state.start_offset)
        return Summary(state.state_epoch, state.leader_epoch, state.start_offset, complete)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        """A share partition's first state (or a reset of it): its start offset, nothing in flight."""
        partition, shard = self._shard(key)
        old = shard.states.get(key)
        if old is not None and state_epoch < old.state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {old.state_epoch}")
        await self._append(partition, shard, key, self._snapshot(old, state_epoch, -1, start_offset, []), SNAPSHOT)

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> None:
        partition, shard = self._shard(key)
        self._fence(shard, key, leader_epoch)
        old = shard.states.get(key)
        if old is not None and state_epoch < old.state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {old.state_epoch}")
        start = start_offset if start_offset >= 0 or old is None else old.start_offset
        per_snapshot = self.config.get_int("share.coordinator.snapshot.update.records.per.snapshot")
        if old is None or shard.updates.get(key, 0) >= per_snapshot:
            merged = overlay(old, _update(old.snapshot_epoch, leader_epoch, start, batches)) if old else None
            state = self._snapshot(old, state_epoch, leader_epoch, start,
                                   merged.batches if merged is not None else sorted(batches, key=_first))
            await self._append(partition, shard, key, state, SNAPSHOT)
        else:
            await self._append(partition, shard, key, _update(old.snapshot_epoch, leader_epoch, start, batches), UPDATE)

    async def delete(self, key: ShareKey) -> None:
        partition, shard = self._shard(key)
        offset = self._append_record(partition, key, None)
        shard.states.pop(key, None)
        shard.updates.pop(key, None)
        shard.snapshots.pop(key, None)
        await self._replicated(partition, offset)
        prune(partition, shard.snapshots)

    # --- records --------------------------------------------------------------------------------------
    @staticmethod
    def _snapshot(old: ShareState | None, state_epoch: int, leader_epoch: int, start: int,
                  batches: list[StateBatch]) -> ShareState:
        now = _now_ms()
        return ShareState(SNAPSHOT, old.snapshot_epoch + 1 if old is not None else 0, start, state_epoch,
                          leader_epoch, old.create_timestamp if old is not None else now, now, batches)

    async def _append(self, partition: Partition, shard: Shard, key: ShareKey, state: ShareState, kind: int) -> None:
        offset = self._append_record(partition, key, state)
        old = shard.states.get(key)
        if kind == SNAPSHOT or old is None:
            shard.states[key] = state
            shard.updates[key] = 0
        else:
            shard.states[key] = overlay(old, state)
            shard.updates[key] = shard.updates.get(key, 0) + 1
        await self._replicated(partition, offset)
        if kind == SNAPSHOT:
            shard.snapshots[key] = offset - 1
            prune(partition, shard.snapshots)

    @staticmethod
    def _append_record(partition: Partition, key: ShareKey, state: ShareState | None) -> int:
        """Append (acks=all: not while the ISR is below min.insync.replicas); the offset after it."""
        partition.check_enough_replicas()
        now = _now_ms()
        kind = SNAPSHOT if state is None else state.kind
        record = Record(0, 0, encode_key(kind, key), None if state is None else encode_value(state))
        batch = build_batch([record], base_timestamp=now, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                            transactional=False)
        return partition.append(RecordBatch(batch), now).last_offset + 1

    async def _replicated(self, partition: Partition, offset: int) -> None:
        if partition.has_followers:
            error = await partition.wait_for_replication(offset, self.config.get_int("share.coordinator.write.timeout.ms"))
            if error != ErrorCode.NONE:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE if error != ErrorCode.NOT_LEADER_OR_FOLLOWER
                                 else ErrorCode.NOT_COORDINATOR, f"{SHARE_GROUP_STATE_TOPIC}: {error.name}")



class LocalSharePersister:
    """A single node's way to its own share coordinator (the same records and rules as a cluster's)."""

    def __init__(self, coordinator: ShareCoordinator, ensure_topic: Callable[[], Awaitable[TopicMeta]]) -> None:
        self.coordinator = coordinator
        self._ensure_topic = ensure_topic
        self._creating: asyncio.Future[None] | None = None
        self._created = False

    async def _ready(self) -> None:
        """``__share_group_state`` created and its partitions open here. Concurrent first uses (share
        groups fetching, an AlterShareGroupOffsets) wait for the one creation: its metadata comes
        before its partitions open, so "it exists" alone is not "it serves"."""
        if self._created:
            await self._create()  # there already: answers at once
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creating)
        self._created = True

    async def _create(self) -> None:
        await self.coordinator.replicas.ready(await self._ensure_topic())

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        await self._ready()
        return self.coordinator.read(key, leader_epoch)

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> None:
        await self._ready()
        await self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches)

    async def summary(self, key: ShareKey) -> tuple[int, int, int] | None:
        await self._ready()  # AlterShareGroupOffsets may be a group's first use of it, as in Kafka
        found = self.coordinator.summary(key)
        return None if found is None else (found.state_epoch, found.start_offset, found.delivery_complete_count)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        await self._ready()
        await self.coordinator.initialize(key, state_epoch, start_offset)

    async def delete(self, key: ShareKey) -> None:
        await self.coordinator.delete(key)

    async def end_offset(self, topic: str, index: int) -> int | None:
        return None  # a single node hosts every partition: ShareGroups reads it there


def _update(snapshot_epoch: int, leader_epoch: int, start: int, batches: list[StateBatch]) -> ShareState:
    return ShareState(UPDATE, snapshot_epoch, start, leader_epoch=leader_epoch, batches=sorted(batches, key=_first))


def _first(batch: StateBatch) -> int:
    return batch.first_offset


def _now_ms() -> int:
    return int(time.time() * 1000)
