"""Direct consumers' metadata slots: one region per consumer, one slot per segment file it reads.

A slot says how far the consumer may read its file: the written end, the high watermark's and the
last stable offset's byte positions, those offsets, the log start, and flags (sealed: read to the
end and ask for the next file; deleted: the file is gone, its bytes are not to be trusted; revoked:
the partition is no longer served here). The broker rewrites the slots of a partition on each
change that wakes parked fetches (an append, a high-watermark move, a truncation), under a sequence
lock, so a consumer reads all of its slots in one consistent copy. That is the only per-batch work
the direct consume path costs the broker: a few words per reading consumer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grete.broker.replica.partition import Partition
from grete.direct.layout import DELETED, FREE, REVOKED, SEALED, SLOT_BYTES
from grete.direct.shm import ShmRegion
from grete.storage.segment import LogSegment


@dataclass(slots=True)
class Slot:
    topic: str
    index: int
    partition: Partition
    segment: LogSegment


def position_of(seg: LogSegment, offset: int) -> int:
    """Byte position in ``seg`` where the batch holding ``offset`` starts (its end for offsets past
    it). High watermark and last stable offset are batch boundaries on a leader."""
    if offset >= seg.next_offset:
        return seg.size
    if offset <= seg.base_offset:
        return 0
    found = seg.find_batch(offset)
    return seg.size if found is None else found.position


def slot_fields(slot: Slot) -> tuple[int, ...]:
    partition, seg = slot.partition, slot.segment
    present, active = partition.segment_state(seg)
    flags = 0 if active else SEALED
    if not present:
        flags |= DELETED
    if not partition.online or not partition.is_leader:
        flags |= REVOKED
    hw, lso = partition.high_watermark, partition.last_stable_offset
    if flags & (DELETED | REVOKED):
        return (seg.base_offset, 0, 0, 0, hw, lso, partition.log_start_offset, flags)
    return (seg.base_offset, seg.size, position_of(seg, hw), position_of(seg, lso), hw, lso,
            partition.log_start_offset, flags)


class ConsumerSlots:
    """One consumer's slot region; slots are packed low so one copy of a prefix reads them all."""

    def __init__(self, directory: Path, max_slots: int, session: int = -1) -> None:
        self.key = secrets.randbits(63)
        self.session = session
        self.path = directory / f"consumer-{self.key}.slots"
        self.max_slots = max_slots
        self.shm = ShmRegion(self.path, max_slots * SLOT_BYTES, writable=True, create=True)
        self.slots: list[Slot | None] = [None] * max_slots
        self.on_close: list[Callable[[], None]] = []  # e.g. an rdma registration's release
        for i in range(max_slots):
            self.shm.slot_write(i * SLOT_BYTES, (FREE, 0, 0, 0, 0, 0, 0, 0))

    def slot_of(self, topic: str, index: int) -> int | None:
        for i, slot in enumerate(self.slots):
            if slot is not None and slot.topic == topic and slot.index == index:
                return i
        return None

    def assign(self, slot: Slot) -> int:
        """The slot index now describing ``slot`` (the partition's previous file's slot is reused)."""
        i = self.slot_of(slot.topic, slot.index)
        if i is None:
            i = self.slots.index(None)  # ValueError when full: the caller checks ``free()`` first
        self.slots[i] = slot
        self.write(i)
        return i

    def free(self) -> int:
        return self.slots.count(None)

    def forget(self, i: int) -> Slot | None:
        if not 0 <= i < self.max_slots:
            return None
        slot, self.slots[i] = self.slots[i], None
        self.shm.slot_write(i * SLOT_BYTES, (FREE, 0, 0, 0, 0, 0, 0, 0))
        return slot

    def write(self, i: int) -> None:
        slot = self.slots[i]
        if slot is not None:
            self.shm.slot_write(i * SLOT_BYTES, slot_fields(slot))

    def update_partition(self, partition: Partition) -> None:
        for i, slot in enumerate(self.slots):
            if slot is not None and slot.partition is partition:
                self.shm.slot_write(i * SLOT_BYTES, slot_fields(slot))

    def refresh(self, current: Callable[[str, int], Partition | None]) -> None:
        """Every slot again; a partition replaced underneath (reopened, deleted) is revoked."""
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            if current(slot.topic, slot.index) is not slot.partition:
                self.shm.slot_write(i * SLOT_BYTES, (slot.segment.base_offset, 0, 0, 0, -1, -1, -1, REVOKED))
            else:
                self.write(i)

    def close(self) -> None:
        self.shm.close()
        self.path.unlink(missing_ok=True)
        for release in self.on_close:
            release()
