"""One partition's log: an ordered list of segments plus the state derived from them."""

from __future__ import annotations

import bisect
import errno
import functools
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import BATCH_OVERHEAD, RecordBatch, iter_batches
from grete.protocol.records.control import parse_control_record
from grete.storage import io
from grete.storage.config import LogConfig
from grete.storage.failure import KafkaStorageException, describe, offline_error
from grete.storage.files import (
    DELETED_SUFFIX,
    parse_future_dir,
    parse_partition_dir,
    read_partition_metadata,
    write_partition_metadata,
)
from grete.storage.leader_epoch import LeaderEpochCache
from grete.storage.loader import LogLoader, new_segment, rebuild_producer_state
from grete.storage.loader import LogOffline as LogOffline  # re-exported: its old home
from grete.storage.producer_state import CompletedTxn, ProducerStateEntry, ProducerStateManager
from grete.storage.segment import INT32_MAX, BatchPos, LogSegment, SegmentFile
from grete.storage.timestamps import exact_offset_for_timestamp
from grete.storage.txnindex import AbortedTxn

log = logging.getLogger(__name__)

# (segment, the segment after it or None) -> delete it?
_Predicate = Callable[[LogSegment, LogSegment | None], bool]


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes at ``position`` of the file open as ``fd``; holds ``file`` so the descriptor
    outlives segment deletion for as long as the slice exists."""

    fd: int
    position: int
    size: int
    file: SegmentFile


@dataclass
class ReadResult:
    slices: list[FileSlice]
    size: int
    first_offset: int

    @property
    def chunks(self) -> list[FileSlice]:
        return self.slices

    def read_bytes(self) -> bytes:
        """Copy the slices into memory (tests, tools; the broker sends them with sendfile)."""
        return b"".join(io.pread(s.fd, s.size, s.position) for s in self.slices)


class UnexpectedAppendOffsetError(ValueError):
    """Kafka's UnexpectedAppendOffsetException: a replicated append starts below the log end
    offset (the follower must truncate, or refetch from its log end, first)."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class OffsetsOutOfOrderError(ValueError):
    """Kafka's OffsetsOutOfOrderException: replicated batches whose offsets do not increase."""


@dataclass(slots=True)  # not frozen: a frozen dataclass costs a microsecond per append to build
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False
    max_timestamp: int = -1
    completed_txn: CompletedTxn | None = None


@dataclass
class _PendingDelete:
    due_ms: int
    segment: LogSegment


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _storage_op(method: Callable[Concatenate[Log, _P], _R]) -> Callable[Concatenate[Log, _P], _R]:
    """A Log operation that may touch the disk: refused at once while the log's directory is
    offline; an OSError takes the directory offline (once) and surfaces as KafkaStorageException."""

    @functools.wraps(method)
    def guarded(self: Log, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self.offline is not None:
            raise offline_error(self.log_dir, (self.topic, self.partition), self.offline)
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise self.storage_failed(exc) from exc

    return guarded


class Log:
    """Directory ``<topic>-<partition>/`` with:

    * segments ``<base>.log/.index/.timeindex/.txnindex`` (see LogSegment, OffsetIndex, TimeIndex,
      TransactionIndex),
    * ``<offset>.snapshot`` producer-state snapshots (ProducerStateManager),
    * ``leader-epoch-checkpoint`` (LeaderEpochCache),
    * ``partition.metadata``: ``version: 0\\ntopic_id: <22-char URL-safe base64 of the UUID>``.

    All methods are synchronous and meant for one thread (the event loop); the cleaner thread
    only takes ``lock`` to swap finished segments in, which is a handful of renames.
    """

    def __init__(self, directory: Path, config: LogConfig, topic: str, partition: int,
                 topic_id: uuid.UUID | None) -> None:
        self.dir = directory
        self.config = config
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.lock = threading.RLock()
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        # Moved by the partition's one rule (grete/broker/partition.py: the ISR's log ends, a single
        # replica's own log end), never by an append here.
        self._high_watermark = 0
        self.recovery_point = 0
        self.epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory, config.producer_id_expiration_ms)
        self._pending_deletes: list[_PendingDelete] = []
        self._next_positions: dict[int, tuple[LogSegment, int]] = {}
        self._unflushed_messages = 0
        # Set by roll(): segments below this offset are complete and can be fsynced off the event
        # loop (LogManager's flusher thread calls flush_rolled), which advances the recovery point.
        self.flush_pending: int | None = None
        self._last_flush_ms = int(time.time() * 1000)
        self.closed = False
        # Why this log's directory is offline (None: online). Set once; every disk operation is
        # then refused with KafkaStorageException without touching the disk.
        self.offline: str | None = None
        # Set by LogManager: takes the whole directory offline. Without one, only this log goes.
        self.on_storage_error: Callable[[Log, OSError], None] | None = None

    # ==== opening and recovery ===================================================================
    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, topic_id: uuid.UUID | None = None,
             recovery_point: int = 0, log_start_offset: int | None = None, clean_shutdown: bool = False,
             high_watermark: int | None = None, now_ms: int | None = None) -> Log:
        parsed = parse_partition_dir(dir.name) or parse_future_dir(dir.name)
        if parsed is None:
            raise ValueError(f"{dir}: not a <topic>-<partition> directory")
        dir.mkdir(parents=True, exist_ok=True)
        stored_id = read_partition_metadata(dir)
        if topic_id is not None and stored_id is not None and stored_id != topic_id:
            raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID if hasattr(ErrorCode, "INCONSISTENT_TOPIC_ID")
                             else ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{dir}: topic id {stored_id} on disk, {topic_id} expected")
        if topic_id is not None and stored_id is None:
            write_partition_metadata(dir, topic_id)
        self = cls(dir, config, parsed[0], parsed[1], topic_id or stored_id)
        self._load(clean_shutdown, recovery_point, log_start_offset,
                   now_ms if now_ms is not None else int(time.time() * 1000))
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self._high_watermark = max(self.log_start_offset, min(hw, self.log_end_offset))
        return self

    def _new_segment(self, base: int, *, active: bool, create: bool, suffix: str = "") -> LogSegment:
        return new_segment(self.dir, self.config, base, active=active, create=create, suffix=suffix)

    def _load(self, clean: bool, recovery_point: int, start: int | None, now_ms: int) -> None:
        loaded = LogLoader(self.dir, self.config, self.epochs, self.producer_state,
                           name=f"{self.topic}-{self.partition}", clean_shutdown=clean,
                           recovery_point=recovery_point, log_start_offset=start, now_ms=now_ms).load()
        self.segments = loaded.segments
        self._bases = [s.base_offset for s in loaded.segments]
        self.log_start_offset = loaded.log_start_offset
        if loaded.recovered:
            self.flush()  # what recovery kept is durable before anything is served from it
        self.recovery_point = loaded.recovery_point

    # ==== offsets ===================================================================================
    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = max(self.log_start_offset, min(value, self.log_end_offset))

    @property
    def last_stable_offset(self) -> int:
        first = self.producer_state.first_unstable_offset
        hw = self._high_watermark
        return hw if first is None else min(first, hw)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.producer_state.expiration_ms = config.producer_id_expiration_ms

    # ==== appending ==================================================================================
    @_storage_op
    def append(self, batch: RecordBatch, *, leader_epoch: int, now_ms: int,
               coordinator_epoch: int | None = None) -> AppendResult:
        """Append one validated client batch (or, if it is a control batch, a broker-built marker).

        Offsets and the leader epoch are patched into the caller's buffer; the bytes go to disk in
        one write. Producer-state violations raise KafkaError before anything is written.
        """
        with self.lock:
            self._ensure_open()
            if batch.is_control:
                return self._append_marker(batch, leader_epoch, now_ms, coordinator_epoch)
            if batch.producer_id >= 0:
                dup = self.producer_state.check(batch)
                if dup is not None:
                    return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp,
                                        self.log_start_offset, True, dup.timestamp)
            return self._write(batch, leader_epoch, now_ms)

    def append_control(self, batch: RecordBatch, *, leader_epoch: int, now_ms: int,
                       coordinator_epoch: int | None = None) -> AppendResult:
        """Append an end-transaction marker batch built by the broker (control + transactional)."""
        if not batch.is_control:
            raise ValueError("append_control needs a control batch")
        return self.append(batch, leader_epoch=leader_epoch, now_ms=now_ms, coordinator_epoch=coordinator_epoch)

    def _append_marker(self, batch: RecordBatch, leader_epoch: int, now_ms: int,
                       coordinator_epoch: int | None) -> AppendResult:
        if coordinator_epoch is None:
            coordinator_epoch = parse_control_record(batch)[1]
        self.producer_state.check_marker(batch, -1 if coordinator_epoch is None else coordinator_epoch)
        return self._write(batch, leader_epoch, now_ms)

    def _write(self, batch: RecordBatch, leader_epoch: int, now_ms: int) -> AppendResult:
        size = batch.size
        if size > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"batch of {size} bytes exceeds segment.bytes {self.config.segment_bytes}")
        base = self.log_end_offset
        last = base + batch.last_offset_delta
        if self.active.should_roll(size, last, now_ms, self.config.segment_bytes,
                                   self.config.segment_ms - self.config.segment_jitter_ms):
            self.roll(now_ms)
        batch.set_base_offset(base)
        batch.set_partition_leader_epoch(leader_epoch)
        append_time = -1
        if self.config.log_append_time and not batch.is_control:
            append_time = now_ms
            batch.set_log_append_time(now_ms)
        seg = self.active
        seg.append(batch.bytes_view(), last, batch.max_timestamp)
        if leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, base)
        done = self.producer_state.update(batch) if batch.producer_id >= 0 else None
        self.producer_state.map_end_offset = last + 1
        if done is not None and done.aborted:
            seg.txn_index.append(self.producer_state.aborted_entry(done))
        self._unflushed_messages += batch.last_offset_delta + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(base, last, append_time, self.log_start_offset, False, batch.max_timestamp, done)

    # ==== appending as a follower ====================================================================
    @_storage_op
    def append_as_follower(self, records: RecordBatch | bytes | bytearray | memoryview, *,
                           now_ms: int) -> AppendResult:
        """Replication (Kafka's ``UnifiedLog.appendAsFollower``): append batches fetched from the
        leader exactly as it wrote them: base offsets, partition leader epochs, timestamps and CRCs
        are kept. Offsets must increase and start at or past the log end offset (gaps, as compaction
        leaves them, are fine). The leader-epoch cache follows the batches' epochs, producer state
        and the transaction index follow their data and markers (no client checks: the leader made
        them). The high watermark is the broker's (Partition's): it is not touched here.

        Nothing is written unless every batch passes: ``UnexpectedAppendOffsetError``,
        ``OffsetsOutOfOrderError``, KafkaError CORRUPT_MESSAGE or RECORD_LIST_TOO_LARGE otherwise.
        """
        batches = [records] if isinstance(records, RecordBatch) else list(iter_batches(records))
        with self.lock:
            self._ensure_open()
            leo = self.log_end_offset
            if not batches:
                return AppendResult(leo, leo - 1, -1, self.log_start_offset)
            self._check_follower_batches(batches, leo)
            for batch in batches:
                self._write_replicated(batch, now_ms)
            return AppendResult(batches[0].base_offset, batches[-1].last_offset, -1, self.log_start_offset,
                                False, max(b.max_timestamp for b in batches))

    def _check_follower_batches(self, batches: list[RecordBatch], leo: int) -> None:
        first = batches[0].base_offset
        if first < leo:
            raise UnexpectedAppendOffsetError(
                f"{self.topic}-{self.partition}: first offset {first} of a replicated append is below "
                f"the log end offset {leo}", first, leo)
        previous_last = first - 1
        for batch in batches:
            if batch.magic != 2 or not batch.crc_ok():
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{self.topic}-{self.partition}: replicated batch at offset "
                                 f"{batch.base_offset} is corrupt (magic {batch.magic})")
            if batch.size > self.config.segment_bytes:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                 f"replicated batch of {batch.size} bytes exceeds segment.bytes "
                                 f"{self.config.segment_bytes}")
            if batch.last_offset_delta < 0 or batch.base_offset <= previous_last:
                raise OffsetsOutOfOrderError(
                    f"{self.topic}-{self.partition}: replicated offsets not increasing: batch "
                    f"[{batch.base_offset}, {batch.last_offset}] after offset {previous_last}")
            previous_last = batch.last_offset

    def _write_replicated(self, batch: RecordBatch, now_ms: int) -> None:
        base, last = batch.base_offset, batch.last_offset
        active = self.active
        if active.should_roll(batch.size, last, now_ms, self.config.segment_bytes,
                              self.config.segment_ms - self.config.segment_jitter_ms):
            self.roll(now_ms)
        if last - self.active.base_offset > INT32_MAX:  # a gap too wide for relative offsets
            self.roll(now_ms, at=base)
        seg = self.active
        seg.append(batch.bytes_view(), last, batch.max_timestamp)
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, base)
        done = self.producer_state.update(batch) if batch.producer_id >= 0 else None
        self.producer_state.map_end_offset = last + 1
        if done is not None and done.aborted:
            seg.txn_index.append(self.producer_state.aborted_entry(done))
        self._unflushed_messages += batch.last_offset_delta + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    @_storage_op
    def roll(self, now_ms: int | None = None, *, at: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the log end offset (or at ``at``, past
        it, for a follower's batch after a gap too wide for the segment's 32-bit relative offsets)."""
        with self.lock:
            old = self.active
            leo = old.next_offset
            base = leo if at is None else max(leo, at)
            if old.size == 0:
                if old.base_offset == base:
                    return old
                return self._replace_empty_active(base)
            old.on_become_inactive()
            self.producer_state.map_end_offset = leo
            self.producer_state.take_snapshot(sync=False)
            seg = self._new_segment(base, active=True, create=True)
            self.segments = [*self.segments, seg]
            self._bases = [*self._bases, base]
            self.flush_pending = leo
            return seg

    def _replace_empty_active(self, base: int) -> LogSegment:
        old = self.active
        old.release()
        old.delete_files()
        seg = self._new_segment(base, active=True, create=True)
        self.segments = [*self.segments[:-1], seg]
        self._bases = [*self._bases[:-1], base]
        return seg

    def flush_rolled(self) -> None:
        """fsync the segments completed by roll() and move the recovery point past them.

        Meant for a helper thread (fsync releases the GIL): inactive segments are never written
        again, so only the list and the recovery point need the lock. Kafka does the same after
        each roll, which keeps crash recovery down to the last segment or so.
        """
        with self.lock:
            target = self.flush_pending
            self.flush_pending = None
            if target is None or target <= self.recovery_point or self.closed:
                return
            todo = [s for s in self.segments if s.base_offset < target and s.next_offset > self.recovery_point
                    and s is not self.active]
        try:
            for seg in todo:
                seg.flush()
            self.producer_state.fsync_snapshots()
        except ValueError:  # closed meanwhile: the next flush covers it
            return
        except OSError as exc:
            if not self.closed:  # a deleted or closed log is not a failed directory
                self.storage_failed(exc)
            return
        with self.lock:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))

    # ==== reading ====================================================================================
    @_storage_op
    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None,
             min_one: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least one batch
        when ``min_one``), never reaching ``upper_bound`` (HW or LSO; default: log end)."""
        with self.lock:
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} is outside [{self.log_start_offset}, {leo}] of "
                                 f"{self.topic}-{self.partition}")
            bound = leo if upper_bound is None else min(upper_bound, leo)
            segments, bases = self.segments, self._bases
        empty = ReadResult([], 0, offset)
        if offset >= bound:
            return empty
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        for seg in segments[i:]:
            if seg.base_offset >= bound:
                return empty
            hit = self._cached_position(seg, offset) or seg.find_batch(offset)
            if hit is None:
                continue
            if hit.base_offset >= bound:
                return empty
            end_pos = seg.size
            if bound < seg.next_offset:
                stop = seg.find_batch(bound, hit.position)
                end_pos = stop.position if stop is not None else seg.size
                if end_pos <= hit.position:
                    return empty  # the bound falls inside this batch: like Kafka, serve nothing
            end = seg.end_within(hit.position, min(hit.position + max_bytes, end_pos))
            if end <= hit.position:
                if not min_one:
                    return empty
                end = hit.position + hit.size
            size = end - hit.position
            self._remember_next(seg, end)
            return ReadResult([FileSlice(seg.fd, hit.position, size, seg.file)], size, hit.base_offset)
        return empty

    # A consumer's next fetch starts where its last one ended. Remembering (offset -> segment,
    # position) for those ends skips the index search for sequential readers; every hit is
    # confirmed by re-reading the batch header, so truncation or compaction cannot mislead it.
    _NEXT_CACHE_MAX = 4096

    def _cached_position(self, seg: LogSegment, offset: int) -> BatchPos | None:
        cached = self._next_positions.get(offset)
        if cached is None or cached[0] is not seg or cached[1] + BATCH_OVERHEAD > seg.size:
            return None
        hit = seg.batch_at(cached[1])
        return hit if hit is not None and hit.base_offset == offset else None

    def _remember_next(self, seg: LogSegment, end: int) -> None:
        if end >= seg.size:
            next_offset = seg.next_offset  # a tail reader: the next append lands right here
        else:
            nxt = seg.batch_at(end)
            if nxt is None:
                return
            next_offset = nxt.base_offset
        if len(self._next_positions) >= self._NEXT_CACHE_MAX:
            self._next_positions.clear()
        self._next_positions[next_offset] = (seg, end)

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
        """Every batch overlapping [start, end), read whole (tests, tools, the cleaner)."""
        if self.offline is not None:
            raise offline_error(self.log_dir, (self.topic, self.partition), self.offline)
        try:
            yield from self._batches(start, end)
        except OSError as exc:
            raise self.storage_failed(exc) from exc

    def _batches(self, start: int, end: int | None) -> Iterator[RecordBatch]:
        stop = self.log_end_offset if end is None else end
        for seg in list(self.segments):
            if seg.next_offset <= start:
                continue
            if seg.base_offset >= stop:
                return
            hit = seg.find_batch(start)
            if hit is None:
                continue
            for bp, batch in seg.scan(hit.position, seg.size, full=True):
                if bp.base_offset >= stop:
                    return
                yield batch

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted txns overlapping [start_offset, end_offset)."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_txns(start_offset, end_offset)]

    def aborted_txns(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The transaction index's entries of aborted txns overlapping [start_offset, end_offset)."""
        out: list[AbortedTxn] = []
        i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for seg in self.segments[i:]:
            found, complete = seg.txn_index.collect(start_offset, end_offset)
            out.extend(found)
            if complete:
                break
        return out

    @_storage_op
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First (offset, timestamp) with timestamp >= ``timestamp``, or None."""
        with self.lock:
            segments = self.segments
        for seg in segments:
            if seg.max_timestamp < timestamp:
                continue
            found = seg.find_timestamp(timestamp, self.log_start_offset)
            if found is None:
                continue
            position, _ = found
            batch = seg.read_batch(position, _batch_size_at(seg, position))
            exact = exact_offset_for_timestamp(batch, timestamp, self.log_start_offset)
            if exact is not None:
                return exact
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the largest timestamp in the log; (-1, -1) if there is none."""
        best = (-1, -1)
        for seg in self.segments:
            if seg.max_timestamp > best[1]:
                best = (seg.offset_of_max_timestamp, seg.max_timestamp)
        return best

    # ==== leader epochs =============================================================================
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    @_storage_op
    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        self.epochs.assign(epoch, start_offset)

    # ==== producer state accessors (for the transaction coordinator) ================================
    def producer(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producer_state.producers.get(producer_id)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return {pid: first for first, pid in self.producer_state.ongoing.items()}

    def last_sequence(self, producer_id: int) -> int:
        entry = self.producer_state.producers.get(producer_id)
        return entry.last_seq if entry is not None else -1

    # ==== truncation, deletion =======================================================================
    @_storage_op
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (whole segments below it are deleted)."""
        with self.lock:
            if offset > self._high_watermark:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"cannot delete before {offset}: high watermark is {self._high_watermark}")
            if offset > self.log_start_offset:
                self._advance_log_start(offset)
                self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= offset,
                                      int(time.time() * 1000))
            return self.log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        psm = self.producer_state
        for pid in [p for p, e in psm.producers.items()
                    if e.last_offset < offset and e.current_txn_first_offset < 0]:
            del psm.producers[pid]

    @_storage_op
    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (replication: a follower's divergent tail)."""
        with self.lock:
            if offset >= self.log_end_offset:
                # Nothing to cut, but an epoch this replica started as leader and never wrote to
                # may sit at the end of its cache; left there it would make the new leader answer
                # a diverging epoch forever (Kafka truncates the cache here too).
                self.epochs.truncate_from_end(self.log_end_offset)
                return
            if offset < self.segments[0].base_offset or offset <= self.log_start_offset:
                self._truncate_fully(max(offset, self.log_start_offset))
                return
            keep = [s for s in self.segments if s.base_offset < offset]
            for seg in self.segments[len(keep):]:
                seg.release()
                seg.delete_files()
            keep[-1].truncate_to(offset)
            keep[-1].offset_index.make_writable()
            keep[-1].time_index.make_writable()
            self.segments, self._bases = keep, [s.base_offset for s in keep]
            # A batch cannot be split: the log may end before ``offset`` (at that batch's start).
            self._after_truncation(self.log_end_offset)

    @_storage_op
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replication: drop the whole log and start empty at ``offset`` (Kafka's
        truncateFullyAndStartAt, for a follower whose fetch offset the leader no longer has)."""
        with self.lock:
            # Nothing of the old log applies (Kafka clears the epoch cache and producer state too).
            self.epochs.clear()
            self.producer_state.delete_snapshots(above=-1)
            self.producer_state.reset(offset)
            self._truncate_fully(offset)
            self.log_start_offset = offset
            self._high_watermark = offset

    def _truncate_fully(self, offset: int) -> None:
        for seg in self.segments:
            seg.release()
            seg.delete_files()
        seg = self._new_segment(offset, active=True, create=True)
        self.segments, self._bases = [seg], [offset]
        self.log_start_offset = offset
        self._after_truncation(offset)

    def _after_truncation(self, offset: int) -> None:
        self._next_positions.clear()  # positions past the cut may hold different batches later
        self.log_start_offset = min(self.log_start_offset, offset)
        self.epochs.truncate_from_end(offset)
        self._high_watermark = min(self._high_watermark, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.producer_state.delete_snapshots(above=offset)
        rebuild_producer_state(self.segments, self.producer_state, int(time.time() * 1000), clean=False)

    def _delete_segments(self, predicate: _Predicate, now_ms: int) -> int:
        """Delete the longest prefix of segments matching ``predicate`` (never past the HW)."""
        doomed: list[LogSegment] = []
        segs = self.segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            end = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and seg.size == 0:
                break
            if not predicate(seg, nxt) or self._high_watermark < end:
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if doomed[-1] is segs[-1]:
            self.roll(now_ms)
        keep = self.segments[len(doomed):]
        self.segments, self._bases = keep, [s.base_offset for s in keep]
        if keep[0].base_offset > self.log_start_offset:
            self._advance_log_start(keep[0].base_offset)
        for seg in doomed:
            self._schedule_delete(seg, now_ms)
        self.producer_state.delete_snapshots(below=keep[0].base_offset)
        return len(doomed)

    def _schedule_delete(self, seg: LogSegment, now_ms: int) -> None:
        """Rename to ``.deleted`` now; unlink after file.delete.delay.ms (slices stay readable)."""
        seg.change_suffix(DELETED_SUFFIX)
        self._pending_deletes.append(_PendingDelete(now_ms + self.config.file_delete_delay_ms, seg))

    @_storage_op
    def run_pending_deletes(self, now_ms: int, *, force: bool = False) -> None:
        with self.lock:  # the cleaner thread schedules deletions too
            due = [p for p in self._pending_deletes if force or p.due_ms <= now_ms]
            if not due:
                return
            self._pending_deletes = [p for p in self._pending_deletes if p not in due]
        for p in due:
            p.segment.delete_files()

    # ==== retention ===================================================================================
    @_storage_op
    def apply_retention(self, now_ms: int) -> int:
        """retention.ms, retention.bytes and the log start offset; returns segments deleted."""
        with self.lock:
            deleted = self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, now_ms)
            if not self.config.delete:
                return deleted
            if self.config.retention_ms >= 0:
                limit = self.config.retention_ms
                deleted += self._delete_segments(lambda seg, nxt: now_ms - seg.largest_timestamp > limit,
                                                 now_ms)
            if self.config.retention_bytes >= 0:
                excess = [self.size_bytes - self.config.retention_bytes]

                def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    if excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_segments(over, now_ms)
            return deleted

    @_storage_op
    def maintenance(self, now_ms: int, *, retention: bool = True) -> None:
        self.run_pending_deletes(now_ms)
        if retention:
            self.apply_retention(now_ms)
        with self.lock:
            self.producer_state.remove_expired(now_ms)
            if (self._unflushed_messages and self.config.flush_ms < 2**62
                    and now_ms - self._last_flush_ms >= self.config.flush_ms):
                self.flush()

    # ==== durability, lifecycle =======================================================================
    @_storage_op
    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below ``up_to`` (default: everything)."""
        with self.lock:
            target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
            if target <= self.recovery_point and self._unflushed_messages == 0:
                return
            for seg in self.segments:
                if seg.next_offset > self.recovery_point or seg is self.active:
                    seg.flush()
                if seg.base_offset >= target:
                    break
            self.recovery_point = max(self.recovery_point, target)
            if target == self.log_end_offset:
                self._unflushed_messages = 0
            self._last_flush_ms = int(time.time() * 1000)

    def close(self) -> None:
        """Flush, snapshot producer state at the log end, trim the active indexes, close files."""
        with self.lock:
            if self.closed:
                return
            if self.offline is not None:  # handlers already closed; nothing can be flushed
                self.closed = True
                return
            try:
                self.flush()
                self.producer_state.map_end_offset = self.log_end_offset
                self.producer_state.take_snapshot()
                self.epochs.flush()
                self.run_pending_deletes(0, force=True)
                for seg in self.segments:
                    seg.close()
            except OSError as exc:
                raise self.storage_failed(exc) from exc
            finally:
                self.closed = True

    @_storage_op
    def delete(self) -> None:
        """Rename the directory to ``<topic>-<p>.<uuid>-delete`` then remove it. Open fetch slices
        keep their descriptors, so in-flight reads finish."""
        with self.lock:
            for seg in self.segments:
                seg.release()
            for p in self._pending_deletes:
                p.segment.release()
            self.segments = []
            self._pending_deletes = []
            self.closed = True
            target = self.dir.with_name(f"{self.topic}-{self.partition}.{uuid.uuid4().hex}-delete")
            io.rename(self.dir, target)
            self.dir = target
            shutil.rmtree(target, ignore_errors=True)

    @property
    def log_dir(self) -> Path:
        """The entry of ``log.dirs`` holding this log (Kafka's unit of failure)."""
        return self.dir.parent

    def storage_failed(self, exc: OSError) -> KafkaStorageException:
        """An OSError hit this log: its directory goes offline (once). Returns the exception the
        caller raises; never raises itself (background threads report through it too)."""
        if self.closed and self.offline is None and exc.errno == errno.EBADF:
            # A reader that outlived close() (a parked fetch woken by the broker's stop, a deleted
            # log's stale read) met the descriptors we closed: that is not a failure of the directory.
            return KafkaStorageException(self.log_dir, (self.topic, self.partition), f"log {self.dir} is closed")
        if self.offline is None:
            if self.on_storage_error is not None:
                self.on_storage_error(self, exc)  # the manager logs once per dir and takes it offline
            else:
                log.error("partition %s-%d in %s is offline: %s", self.topic, self.partition, self.log_dir,
                          describe(exc))
            self.go_offline(describe(exc))  # no-op when the manager already did
        return offline_error(self.log_dir, (self.topic, self.partition), self.offline or describe(exc))

    def go_offline(self, reason: str) -> None:
        """Stop using the disk: later operations raise KafkaStorageException; descriptors and
        mappings are closed without flushing (Kafka's closeHandlers), so a failed device can be
        unmounted. In-memory offsets stay readable."""
        with self.lock:
            if self.offline is not None:
                return
            self.offline = reason
            self.flush_pending = None
            for seg in [*self.segments, *(p.segment for p in self._pending_deletes)]:
                try:
                    seg.release()
                    seg.file.close()
                except (OSError, ValueError):
                    pass  # already closed, or the device is gone: nothing more to release

    def _ensure_open(self) -> None:
        if self.closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.dir} is closed")

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")


def _batch_size_at(seg: LogSegment, position: int) -> int:
    head = io.pread(seg.fd, 12, position)
    return int.from_bytes(head[8:12], "big", signed=True) + 12

