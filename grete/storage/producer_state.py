"""Per-producer idempotence and transaction state of one partition, with Kafka's snapshots."""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import crc32c

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch
from grete.protocol.records.control import ControlType, parse_control_record
from grete.storage import io
from grete.storage.files import SNAPSHOT_SUFFIX, atomic_write, parse_offset_name, segment_file
from grete.storage.txnindex import AbortedTxn

BATCHES_TO_RETAIN: Final = 5
SNAPSHOT_VERSION: Final = 1
_SNAP_HEAD = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
INT32_MAX: Final = 2**31 - 1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        last_seq = batch.last_sequence
        for meta in self.batches:
            if meta.first_seq == batch.base_sequence and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=BATCHES_TO_RETAIN),
                                  self.coordinator_epoch, self.last_timestamp, self.current_txn_first_offset)


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Producer ids seen on a partition: epoch, last five batches, open transaction.

    Snapshot file ``<offset>.snapshot`` (offset = next offset the state covers, 20 digits), as
    Kafka writes it (big-endian)::

        version:int16 (1)  crc:uint32 (CRC-32C of every byte after this field)
        count:int32, then per producer:
          producerId:int64 epoch:int16 lastSequence:int32 lastOffset:int64 offsetDelta:int32
          timestamp:int64 coordinatorEpoch:int32 currentTxnFirstOffset:int64 (-1: none)

    Only the newest batch of each producer is in a snapshot (as in Kafka), so duplicate
    detection after a restart covers one batch per producer until new ones arrive.
    """

    def __init__(self, directory: Path, expiration_ms: int) -> None:
        self.dir = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # txn first offset -> producer id, in offset order
        self.map_end_offset = 0  # state reflects every batch below this offset

    # --- validation before an append ----------------------------------------------------------------
    def check(self, batch: RecordBatch) -> BatchMetadata | None:
        """Raise on a producer-state violation; return the retained batch this one duplicates."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            if batch.is_transactional and not batch.is_control:
                return None
            return None
        dup = entry.find_duplicate(batch)
        if dup is not None:
            return dup
        self._check_epoch(entry, batch)
        if batch.is_control:
            return None
        # Coordinator writes (transactional offset commits) carry no sequence, as in Kafka.
        if batch.base_sequence != NO_SEQUENCE:
            self._check_sequence(entry, batch)
        if not batch.is_transactional and entry.current_txn_first_offset >= 0:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"expected a transactional write from producer {batch.producer_id}")
        return None

    @staticmethod
    def _check_epoch(entry: ProducerStateEntry, batch: RecordBatch) -> None:
        if batch.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"epoch {batch.producer_epoch} of producer {batch.producer_id} is older "
                             f"than {entry.epoch}")

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, batch: RecordBatch) -> None:
        first_seq = batch.base_sequence
        if batch.producer_epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"new epoch {batch.producer_epoch} must start at sequence 0, got {first_seq}")
            return
        if entry.epoch == NO_PRODUCER_EPOCH:
            return
        if not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {batch.producer_id}: sequence {first_seq} after {entry.last_seq}")

    def check_marker(self, batch: RecordBatch, coordinator_epoch: int) -> None:
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return
        self._check_epoch(entry, batch)
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"coordinator epoch {coordinator_epoch} < {entry.coordinator_epoch}")

    # --- updates after the bytes are written ---------------------------------------------------------
    def update(self, batch: RecordBatch) -> CompletedTxn | None:
        """Record an appended batch (offsets already assigned). Markers return the closed txn."""
        pid = batch.producer_id
        if pid < 0:
            self.map_end_offset = batch.next_offset
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if batch.producer_epoch != entry.epoch:
            entry.epoch = batch.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, batch.max_timestamp)
        self.map_end_offset = batch.next_offset
        if batch.is_control:
            return self._end_txn(entry, batch)
        if batch.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, batch.last_offset,
                                               batch.last_offset_delta, batch.max_timestamp))
        if batch.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = batch.base_offset
            self.ongoing[batch.base_offset] = pid
        return None

    def _end_txn(self, entry: ProducerStateEntry, batch: RecordBatch) -> CompletedTxn | None:
        kind, coordinator_epoch = parse_control_record(batch)
        if kind not in (ControlType.ABORT, ControlType.COMMIT) or coordinator_epoch is None:
            return None
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.current_txn_first_offset
        if first >= 0:
            self.ongoing.pop(first, None)
        entry.current_txn_first_offset = -1
        return CompletedTxn(entry.producer_id, first if first >= 0 else batch.base_offset,
                            batch.base_offset, kind == ControlType.ABORT)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """LSO once ``completed`` is closed: the earliest other open txn, else just past the marker."""
        for first, pid in self.ongoing.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def aborted_entry(self, completed: CompletedTxn) -> AbortedTxn:
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.last_stable_offset(completed))

    @property
    def first_unstable_offset(self) -> int | None:
        return next(iter(self.ongoing), None)

    # --- expiry, truncation ----------------------------------------------------------------------
    def remove_expired(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.map_end_offset = offset

    # --- snapshots -----------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        found = []
        for name in io.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                offset = parse_offset_name(name)
                if offset is not None:
                    found.append(offset)
        return sorted(found)

    def take_snapshot(self, sync: bool = True) -> Path:
        rows = []
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            rows.append(_SNAP_ENTRY.pack(
                e.producer_id, e.epoch, last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1, last.offset_delta if last else 0,
                e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset))
        body = _SNAP_COUNT.pack(len(rows)) + b"".join(rows)
        data = _SNAP_HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + body
        path = segment_file(self.dir, self.map_end_offset, SNAPSHOT_SUFFIX)
        atomic_write(path, data, sync=sync)
        return path

    def load_snapshot(self, offset: int, now_ms: int) -> bool:
        """Replace the state with snapshot ``offset``; False (and the file deleted) if it is bad."""
        path = segment_file(self.dir, offset, SNAPSHOT_SUFFIX)
        try:
            entries = read_snapshot(path)
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            return False
        self.reset(offset)
        for e in entries:
            if now_ms - e.last_timestamp >= self.expiration_ms and e.current_txn_first_offset < 0:
                continue
            self.producers[e.producer_id] = e
            if e.current_txn_first_offset >= 0:
                self.ongoing[e.current_txn_first_offset] = e.producer_id
        self.ongoing = dict(sorted(self.ongoing.items()))
        return True

    def fsync_snapshots(self) -> None:
        """Roll writes snapshots without fsync (on the event loop); the flusher makes them durable."""
        for offset in self.snapshot_offsets()[-2:]:
            fd = io.open(segment_file(self.dir, offset, SNAPSHOT_SUFFIX), os.O_RDONLY)
            try:
                io.fsync(fd)
            finally:
                os.close(fd)

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        for offset in self.snapshot_offsets():
            if (below is not None and offset < below) or (above is not None and offset > above):
                segment_file(self.dir, offset, SNAPSHOT_SUFFIX).unlink(missing_ok=True)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    data = path.read_bytes()
    if len(data) < _SNAP_HEAD.size + _SNAP_COUNT.size:
        raise ValueError(f"{path}: too short")
    version, crc = _SNAP_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"{path}: unknown snapshot version {version}")
    body = data[_SNAP_HEAD.size:]
    if crc32c.crc32c(body) != crc:
        raise ValueError(f"{path}: snapshot CRC mismatch")
    (count,) = _SNAP_COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _SNAP_COUNT.size + count * _SNAP_ENTRY.size:
        raise ValueError(f"{path}: bad entry count {count}")
    entries = []
    for n in range(count):
        (pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first) = _SNAP_ENTRY.unpack_from(
            body, _SNAP_COUNT.size + n * _SNAP_ENTRY.size)
        entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coord, last_timestamp=ts,
                                   current_txn_first_offset=txn_first)
        if last_offset >= 0:
            first_seq = NO_SEQUENCE if last_seq == NO_SEQUENCE else last_seq - delta if last_seq >= delta \
                else last_seq - delta + INT32_MAX + 1
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset, delta, ts))
        entries.append(entry)
    return entries
