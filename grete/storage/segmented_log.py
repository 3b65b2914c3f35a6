"""A partition's directory and its segments: opening it (recovery runs in loader.py), rolling and
flushing segments, deleting them after ``file.delete.delay.ms``, closing, and failing: an OSError
takes the log's directory offline. Log (log.py) builds appends and reads on it, LogRetention
(log_retention.py) shrinks it."""

from __future__ import annotations

import errno
import functools
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, Self, TypeVar

from grete.protocol.errors import ErrorCode, KafkaError
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
from grete.storage.loader import LogLoader, new_segment
from grete.storage.log_read import NextPositions
from grete.storage.producer_state import ProducerStateManager
from grete.storage.segment import LogSegment

log = logging.getLogger(__name__)


@dataclass
class _PendingDelete:
    due_ms: int
    segment: LogSegment


_L = TypeVar("_L", bound="SegmentedLog")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def storage_op(method: Callable[Concatenate[_L, _P], _R]) -> Callable[Concatenate[_L, _P], _R]:
    """A Log operation that may touch the disk: refused at once while the log's directory is
    offline; an OSError takes the directory offline (once) and surfaces as KafkaStorageException."""

    @functools.wraps(method)
    def guarded(self: _L, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self.offline is not None:
            raise offline_error(self.log_dir, (self.topic, self.partition), self.offline)
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise self.storage_failed(exc) from exc

    return guarded


class SegmentedLog:
    """The segments of ``<topic>-<partition>/`` and the offsets they bound. All methods are
    synchronous and meant for one thread (the event loop); the cleaner thread only takes ``lock``
    to swap finished segments in, which is a handful of renames."""

    def __init__(self, directory: Path, config: LogConfig, topic: str, partition: int,
                 topic_id: uuid.UUID | None) -> None:
        self.dir = directory
        self._log_dir = (directory, directory.parent)  # (self.dir, its parent): log_dir without a new Path per call
        self.config = config
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.lock = threading.RLock()
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        # Moved by the partition's one rule (grete/broker/replica/partition.py: the ISR's log ends, a single
        # replica's own log end), never by an append here.
        self._high_watermark = 0
        self.recovery_point = 0
        self.epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory, config.producer_id_expiration_ms)
        self._pending_deletes: list[_PendingDelete] = []
        self._next_positions = NextPositions()
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
        self.on_storage_error: Callable[[Self, OSError], None] | None = None

    # ==== opening and recovery ====================================================================
    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, topic_id: uuid.UUID | None = None,
             recovery_point: int = 0, log_start_offset: int | None = None, clean_shutdown: bool = False,
             high_watermark: int | None = None, now_ms: int | None = None) -> Self:
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

    # ==== offsets =================================================================================
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

    def offsets(self) -> tuple[int, int, int, int]:
        """(high watermark, last stable, log start, log end) read in one call: what an empty Fetch
        answer depends on, asked of every partition of each repeated idle fetch."""
        high_watermark = self._high_watermark
        ongoing = self.producer_state.ongoing
        stable = min(next(iter(ongoing)), high_watermark) if ongoing else high_watermark
        return high_watermark, stable, self.log_start_offset, self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.producer_state.expiration_ms = config.producer_id_expiration_ms

    # ==== rolling and flushing ====================================================================
    @storage_op
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

    @storage_op
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

    # ==== deleting segments =======================================================================
    def _schedule_delete(self, seg: LogSegment, now_ms: int) -> None:
        """Rename to ``.deleted`` now; unlink after file.delete.delay.ms (slices stay readable)."""
        seg.change_suffix(DELETED_SUFFIX)
        self._pending_deletes.append(_PendingDelete(now_ms + self.config.file_delete_delay_ms, seg))

    @storage_op
    def run_pending_deletes(self, now_ms: int, *, force: bool = False) -> None:
        with self.lock:  # the cleaner thread schedules deletions too
            due = [p for p in self._pending_deletes if force or p.due_ms <= now_ms]
            if not due:
                return
            self._pending_deletes = [p for p in self._pending_deletes if p not in due]
        for p in due:
            p.segment.delete_files()

    # ==== lifecycle and failure ===================================================================
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

    @storage_op
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
        directory, parent = self._log_dir
        if directory is not self.dir:
            self._log_dir = directory, parent = self.dir, self.dir.parent
        return parent

    def storage_failed(self: Self, exc: OSError) -> KafkaStorageException:
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
