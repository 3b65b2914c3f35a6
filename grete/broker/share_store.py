"""Share partitions' state in ``__share_group_state`` (Kafka's ShareSnapshot records), and back.

A single node's store: a snapshot of one share partition is appended (one record, one batch) whenever
its durable state changes: its creation (the SPSO chosen by ``share.auto.offset.reset``),
acknowledgements, releases, lock expiries. Acquisitions are not written (Kafka does not persist locks
either): after a restart records that were acquired are Available with the delivery count of the last
snapshot. The records before the oldest snapshot still needed are deleted as they become redundant
(``prune``), as Kafka's share coordinator does. In a ZooKeeper cluster the share coordinators write
instead (grete.broker.share_coordinator); ``read_states`` and ``overlay`` serve both.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from grete.broker.config import BrokerConfig
from grete.broker.partition import Partition
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.share_format import (
    SNAPSHOT,
    ShareKey,
    ShareState,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC

EnsureTopic = Callable[[], Awaitable[TopicMeta]]


class ShareStateStore:
    def __init__(self, config: BrokerConfig, partition: Callable[[str, int], Partition],
                 ensure_topic: EnsureTopic) -> None:
        self.config = config
        self._partition = partition
        self._ensure_topic = ensure_topic
        self._epochs: dict[ShareKey, int] = {}
        self._created: dict[ShareKey, int] = {}
        self._snapshots: dict[int, dict[ShareKey, int]] = {}  # per state partition: each key's newest snapshot
        self.ready = False

    @property
    def partitions(self) -> int:
        return self.config.get_int("share.coordinator.state.topic.num.partitions")

    async def ensure_topic(self) -> None:
        if not self.ready:
            await self._ensure_topic()
            self.ready = True

    def write(self, key: ShareKey, start_offset: int, batches: list[tuple[int, int, int, int]],
              leader_epoch: int) -> None:
        """Append the share partition's snapshot now (synchronous: appends stay in change order)."""
        if not self.ready:
            return
        now = int(time.time() * 1000)
        epoch = self._epochs.get(key, -1) + 1
        self._epochs[key] = epoch
        created = self._created.setdefault(key, now)
        state = ShareState(SNAPSHOT, epoch, start_offset, 0, leader_epoch, created, now,
                           [StateBatch(*b) for b in batches])
        self._append(key, encode_value(state), now)

    def delete(self, key: ShareKey) -> None:
        """A tombstone for the share partition's key: compaction drops its snapshots."""
        if not self.ready:
            return
        now = int(time.time() * 1000)
        self._epochs.pop(key, None)
        self._created.pop(key, None)
        self._append(key, None, now)

    def _append(self, key: ShareKey, value: bytes | None, now: int) -> None:
        index = partition_for(key, self.partitions)
        batch = build_batch([Record(0, 0, encode_key(SNAPSHOT, key), value)], base_timestamp=now, producer_id=-1,
                            producer_epoch=-1, base_sequence=-1, transactional=False)
        partition = self._partition(SHARE_GROUP_STATE_TOPIC, index)
        offset = partition.append(RecordBatch(batch), now).last_offset
        snapshots = self._snapshots.setdefault(index, {})
        if value is None:
            snapshots.pop(key, None)
        else:
            snapshots[key] = offset
        prune(partition, snapshots)

    def load(self, topic: TopicMeta) -> dict[ShareKey, ShareState]:
        """Every share partition's state: the newest snapshot, with later updates laid over it."""
        states: dict[ShareKey, ShareState] = {}
        for index in sorted(topic.partitions):
            snapshots = self._snapshots[index] = {}
            states.update(read_states(self._partition(SHARE_GROUP_STATE_TOPIC, index).committed_batches(), snapshots))
        for key, state in states.items():
            self._epochs[key] = state.snapshot_epoch
            self._created[key] = state.create_timestamp
        self.ready = True
        return states


def read_states(batches: Iterable[RecordBatch], snapshots: dict[ShareKey, int] | None = None,
                ) -> dict[ShareKey, ShareState]:
    """The share partitions' states in one ``__share_group_state`` partition's batches: each key's
    newest ShareSnapshot with the ShareUpdates after it laid over it; a tombstone forgets the key.
    ``snapshots`` gets the offset of each live key's newest snapshot (what pruning may not pass)."""
    states: dict[ShareKey, ShareState] = {}
    found: dict[ShareKey, int] = {} if snapshots is None else snapshots
    for batch in batches:
        if batch.is_control:
            continue
        for r in decode_records(batch):
            decoded = decode_key(r.key) if r.key is not None else None
            if decoded is None:
                continue
            kind, key = decoded
            if r.value is None:
                states.pop(key, None)
                found.pop(key, None)
                continue
            state = decode_value(kind, r.value)
            if kind == SNAPSHOT or key not in states:
                states[key] = state
                found[key] = batch.base_offset + r.offset_delta
            else:
                states[key] = overlay(states[key], state)
    return states


def prune(partition: Partition, snapshots: dict[ShareKey, int]) -> None:
    """``__share_group_state`` is not compacted (cleanup.policy delete, retention.ms -1, as Kafka
    creates it): like Kafka's share coordinator, delete the records before the oldest snapshot a live
    key still needs (everything, when no key is live)."""
    point = min(min(snapshots.values(), default=partition.log_end_offset), partition.high_watermark)
    if point > partition.log_start_offset:
        partition.delete_records_before(point)


def overlay(base: ShareState, update: ShareState) -> ShareState:
    """A ShareUpdate: its start offset, its batches replacing the snapshot's offsets they cover."""
    covered = [(b.first_offset, b.last_offset) for b in update.batches]
    kept: list[StateBatch] = []
    for b in base.batches:
        if b.last_offset < update.start_offset:
            continue
        pieces = [(max(b.first_offset, update.start_offset), b.last_offset)]
        for first, last in covered:
            pieces = [p for lo, hi in pieces for p in _minus(lo, hi, first, last)]
        kept.extend(StateBatch(lo, hi, b.delivery_state, b.delivery_count) for lo, hi in pieces)
    merged = sorted(kept + update.batches, key=lambda b: b.first_offset)
    return ShareState(SNAPSHOT, update.snapshot_epoch, update.start_offset, base.state_epoch,
                      update.leader_epoch, base.create_timestamp, base.write_timestamp, merged)


def _minus(lo: int, hi: int, first: int, last: int) -> list[tuple[int, int]]:
    if last < lo or first > hi:
        return [(lo, hi)]
    out = []
    if lo < first:
        out.append((lo, first - 1))
    if last < hi:
        out.append((last + 1, hi))
    return out
