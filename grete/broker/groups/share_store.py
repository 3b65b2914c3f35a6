"""Reading ``__share_group_state`` (Kafka's ShareSnapshot and ShareUpdate records) back into share
partitions' states, and pruning it; the share coordinator (grete.broker.groups.share_coordinator) writes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from grete.broker.replica.partition import Partition
from grete.coordinator.share.share_format import (
    SNAPSHOT,
    ShareKey,
    ShareState,
    StateBatch,
    decode_key,
    decode_value,
)
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import decode_records


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
