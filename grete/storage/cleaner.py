"""Log compaction (cleanup.policy=compact): keep the last record of every key.

How one pass over a log works (Kafka's algorithm, section 4.8 of the design chapter):

1. Plan, under the log lock (cheap): the *dirty* part runs from the cleaner checkpoint to the first
   uncleanable offset: the active segment, the first open transaction (LSO) and segments younger
   than min.compaction.lag.ms are never cleaned. Only whole segments take part. A pass is due when
   the dirty ratio exceeds min.cleanable.dirty.ratio or max.compaction.lag.ms has run out.
2. Offset map: read the dirty segments and remember, for every key, the offset of its last
   record (records of aborted transactions and control records do not count).
3. Copy: recopy every segment below the dirty end, in groups that fit one segment, into
   ``<base>.log.cleaned`` (+ indexes), keeping a record only if no later record has its key.
   Aborted records always go. Tombstones and transaction markers go once they sit in an
   already-cleaned segment older than delete.retention.ms. A batch keeps its base offset, last
   offset delta, producer id/epoch and base sequence, so offsets never change and an emptied
   batch that is a producer's last one stays (empty) to carry the producer's state.
4. Swap, under the lock: rename ``.cleaned`` -> ``.swap``, old segments -> ``.deleted`` (unlinked
   after file.delete.delay.ms, so in-flight fetch slices stay valid), then ``.swap`` -> live.
   A crash at any point is repaired by Log.open: ``.cleaned`` is deleted, a ``.log.swap`` is
   completed.

Steps 2 and 3 only read and write files named in a picklable ``CleanSpec``, so the LogManager's
cleaner runs them in a separate process (a CPU-bound thread would hold the GIL against the event
loop); the cleaner's thread only plans, waits and swaps. ``clean_log`` runs a pass in-process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.storage import io
from grete.storage.failure import KafkaStorageException
from grete.storage.files import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from grete.storage.segment import LogSegment, scan_fd
from grete.storage.txnindex import AbortedRanges, AbortedTxn, aborted_ranges, in_aborted_txn

if TYPE_CHECKING:
    from grete.storage.log import Log

log = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


class CompactionAborted(Exception):
    """The log changed under the cleaner (truncation, deletion, close); the pass is dropped."""


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    path: str  # the .log file at planning time
    size: int  # bytes to read (appends after planning are not part of the pass)
    end_offset: int  # base offset of the next segment (or the dirty end)
    max_timestamp: int
    aborted_entries: tuple[AbortedTxn, ...]


@dataclass(frozen=True)
class CleanSpec:
    """Everything a pass needs, without open files: it may cross a process boundary."""

    dir: str
    segments: tuple[SegmentInfo, ...]  # every segment below dirty_end, in order
    first_dirty: int
    dirty_end: int
    aborted: AbortedRanges
    producer_last_offset: dict[int, int]
    now_ms: int
    segment_bytes: int
    index_bytes: int
    index_interval: int
    delete_retention_ms: int

    def dirty_bytes(self) -> int:
        return sum(s.size for s in self.segments if s.end_offset > self.first_dirty)

    def clean_bytes(self) -> int:
        return sum(s.size for s in self.segments if s.end_offset <= self.first_dirty)


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    batches_removed: int = 0
    seconds: float = 0.0
    groups: list[tuple[int, int]] = field(default_factory=list)  # (base offset, end offset) swapped


# ==== planning (under the log lock) ===================================================================

def plan_cleaning(lg: Log, first_dirty: int, now_ms: int, *,
                  force: bool = False) -> tuple[CleanSpec, list[LogSegment]] | None:
    """What a pass over ``lg`` would clean (and the segment objects it replaces), or None."""
    cfg = lg.config
    with lg.lock:
        segs = list(lg.segments)
        first_dirty = max(first_dirty, lg.log_start_offset)
        end = min(segs[-1].base_offset, lg.high_watermark)  # never the active segment
        unstable = lg.producer_state.first_unstable_offset
        if unstable is not None:
            end = min(end, unstable)
        if cfg.min_compaction_lag_ms > 0:
            young = next((s for s in segs[:-1] if s.max_timestamp > now_ms - cfg.min_compaction_lag_ms), None)
            if young is not None:
                end = min(end, young.base_offset)
        chosen = [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= end]
        if not chosen:
            return None
        dirty_end = segs[len(chosen)].base_offset
        if dirty_end <= first_dirty and not force:
            return None
        aborted = aborted_ranges(txn for seg in segs for txn in seg.txn_index.entries)
        infos = tuple(SegmentInfo(s.base_offset, str(s.log_path), s.size, segs[i + 1].base_offset, s.max_timestamp,
                                  tuple(s.txn_index.entries)) for i, s in enumerate(chosen))
        spec = CleanSpec(str(lg.dir), infos, first_dirty, dirty_end, aborted,
                         {pid: e.last_offset for pid, e in lg.producer_state.producers.items()}, now_ms,
                         cfg.segment_bytes, cfg.segment_index_bytes, cfg.index_interval_bytes,
                         cfg.delete_retention_ms)
    if force or _due(spec, chosen, cfg.min_cleanable_dirty_ratio, cfg.max_compaction_lag_ms):
        return spec, chosen
    return None


def _due(spec: CleanSpec, chosen: list[LogSegment], min_ratio: float, max_lag_ms: int) -> bool:
    dirty, clean = spec.dirty_bytes(), spec.clean_bytes()
    if dirty and dirty / (dirty + clean) > min_ratio:  # strictly greater, as in Kafka
        return True
    first_dirty_seg = next((seg for seg, info in zip(chosen, spec.segments, strict=True)
                            if info.end_offset > spec.first_dirty), None)
    if first_dirty_seg is None or max_lag_ms >= 2**62:
        return False
    born = first_dirty_seg.rolling_base_timestamp
    return born is not None and born >= 0 and spec.now_ms - born > max_lag_ms


# ==== the file work (in-process or in the cleaner process) ==========================================

_stop_flag: Any = None  # a multiprocessing.Event in the cleaner process


def _stopping(stop: threading.Event | None) -> bool:
    return (stop is not None and stop.is_set()) or (_stop_flag is not None and _stop_flag.is_set())


def _batches(info: SegmentInfo, start_offset: int = 0) -> Iterator[RecordBatch]:
    try:
        fd = io.open(info.path, os.O_RDONLY)
    except FileNotFoundError:
        raise CompactionAborted(f"{info.path} is gone") from None
    try:
        for bp, batch in scan_fd(fd, 0, info.size, full=True):
            if bp.base_offset < 0:
                raise CompactionAborted(f"{info.path}: unreadable batch at {bp.position}")
            if bp.last_offset >= start_offset:
                yield batch
    finally:
        os.close(fd)


def build_offset_map(spec: CleanSpec, stop: threading.Event | None = None) -> dict[bytes, int]:
    """key -> offset of its last record in [first_dirty, dirty_end)."""
    offsets: dict[bytes, int] = {}
    for info in spec.segments:
        if info.end_offset <= spec.first_dirty:
            continue
        for batch in _batches(info, spec.first_dirty):
            if _stopping(stop):
                raise CompactionAborted("cleaner stopping")
            if batch.is_control or in_aborted_txn(spec.aborted, batch):
                continue
            base = batch.base_offset
            for rec in decode_records(batch):
                offset = base + rec.offset_delta
                if rec.key is not None and spec.first_dirty <= offset < spec.dirty_end:
                    offsets[rec.key] = offset
    return offsets


def group_segments(spec: CleanSpec) -> list[list[int]]:
    """Indexes into spec.segments, grouped so each group's input fits one segment."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, info in enumerate(spec.segments):
        span_ok = not current or info.end_offset - spec.segments[current[0]].base_offset <= INT32_MAX
        if current and (size + info.size > spec.segment_bytes or not span_ok):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += info.size
    if current:
        groups.append(current)
    return groups


class _TxnTracker:
    """Whether each producer's current transaction still has retained data (decides markers)."""

    def __init__(self) -> None:
        self.has_data: dict[int, bool] = {}

    def saw_data(self, pid: int, kept: bool) -> None:
        self.has_data[pid] = self.has_data.get(pid, False) or kept

    def marker(self, pid: int) -> bool:
        return self.has_data.pop(pid, False)


def write_cleaned_group(spec: CleanSpec, group: list[int], offsets: dict[bytes, int], stats: CleanStats,
                        stop: threading.Event | None = None) -> None:
    """Write the cleaned copy of one group as ``<base>.*.cleaned`` files (flushed, indexes trimmed)."""
    first = spec.segments[group[0]]
    out = LogSegment(Path(spec.dir), first.base_offset, index_bytes=spec.index_bytes,
                     index_interval=spec.index_interval, active=True, suffix=CLEANED_SUFFIX, create=True)
    tracker = _TxnTracker()
    horizon = spec.now_ms - spec.delete_retention_ms
    try:
        for i in group:
            info = spec.segments[i]
            # Tombstones and markers may only go from segments a previous pass already cleaned.
            drop_deletes = info.end_offset <= spec.first_dirty and info.max_timestamp < horizon
            for batch in _batches(info):
                if _stopping(stop):
                    raise CompactionAborted("cleaner stopping")
                stats.bytes_read += batch.size
                data = _clean_batch(batch, spec, offsets, drop_deletes, tracker, stats)
                if data is not None:
                    kept = RecordBatch(data)
                    out.append(data, kept.last_offset, kept.max_timestamp)
                    stats.bytes_written += len(data)
        for i in group:  # aborted-transaction entries stay: read_committed fetches still use them
            for txn in spec.segments[i].aborted_entries:
                out.txn_index.append(txn)
        out.on_become_inactive()
        out.flush()
        out.close()
    except BaseException:
        out.close()
        out.delete_files()
        raise


def _clean_batch(batch: RecordBatch, spec: CleanSpec, offsets: dict[bytes, int], drop_deletes: bool,
                 tracker: _TxnTracker, stats: CleanStats) -> bytes | bytearray | None:
    """The batch to write (original bytes if untouched), or None to drop it entirely."""
    pid = batch.producer_id
    if batch.is_control:
        if batch.is_transactional and not tracker.marker(pid) and drop_deletes:
            stats.batches_removed += 1
            return None
        return bytes(batch.bytes_view())
    aborted = in_aborted_txn(spec.aborted, batch)
    records = [] if aborted else decode_records(batch)
    base = batch.base_offset
    kept: list[Record] = []
    for rec in records:
        offset = base + rec.offset_delta
        if rec.key is not None and offsets.get(rec.key, -1) > offset:
            continue  # a later record has this key
        if rec.value is None and drop_deletes:
            continue  # tombstone past delete.retention.ms
        kept.append(rec)
    if batch.is_transactional:
        tracker.saw_data(pid, bool(kept))
    removed = batch.records_count - len(kept)
    stats.records_removed += removed
    if removed == 0:
        return bytes(batch.bytes_view())
    if not kept and not (pid >= 0 and spec.producer_last_offset.get(pid) == batch.last_offset):
        stats.batches_removed += 1
        return None
    log_append = batch.timestamp_type == 1
    max_ts = batch.max_timestamp if log_append or not kept else \
        batch.base_timestamp + max(r.timestamp_delta for r in kept)
    return build_batch(kept, compression=batch.compression, base_offset=base,
                       base_timestamp=batch.base_timestamp, producer_id=pid,
                       producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                       transactional=batch.is_transactional, control=False,
                       partition_leader_epoch=batch.partition_leader_epoch,
                       timestamp_type=batch.timestamp_type, max_timestamp=max_ts,
                       last_offset_delta=batch.last_offset_delta)


def write_cleaned(spec: CleanSpec, stop: threading.Event | None = None) -> tuple[list[list[int]], CleanStats]:
    """Steps 2 and 3 for a whole pass: offset map, then every group's ``.cleaned`` files."""
    started = time.monotonic()
    stats = CleanStats()
    offsets = build_offset_map(spec, stop)
    groups = group_segments(spec)
    done: list[list[int]] = []
    try:
        for group in groups:
            write_cleaned_group(spec, group, offsets, stats, stop)
            done.append(group)
    except BaseException:
        discard_cleaned(spec, done)
        raise
    stats.seconds = time.monotonic() - started
    return done, stats


def discard_cleaned(spec: CleanSpec, groups: list[list[int]]) -> None:
    for group in groups:
        base = spec.segments[group[0]].base_offset
        for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_file(Path(spec.dir), base, kind + CLEANED_SUFFIX).unlink(missing_ok=True)


# ==== swapping (under the log lock) ==================================================================

def swap_in(lg: Log, olds: list[LogSegment], old_sizes: list[int], cleaned: LogSegment, now_ms: int) -> None:
    """Replace ``olds`` by ``cleaned`` in the log: renames only, under the log lock."""
    with lg.lock:
        segs = lg.segments
        try:
            start = segs.index(olds[0])
        except ValueError:
            raise CompactionAborted("segment no longer in the log") from None
        current = segs[start:start + len(olds)]
        if current != olds or [s.size for s in olds] != old_sizes or lg.closed:
            raise CompactionAborted("log changed while cleaning")
        cleaned.change_suffix(SWAP_SUFFIX)
        for old in olds:
            lg._schedule_delete(old, now_ms)
        cleaned.change_suffix("")
        lg.segments = segs[:start] + [cleaned] + segs[start + len(olds):]
        lg._bases = [s.base_offset for s in lg.segments]


def swap_all(lg: Log, spec: CleanSpec, olds: list[LogSegment], groups: list[list[int]], stats: CleanStats) -> None:
    for n, group in enumerate(groups):
        info = spec.segments[group[0]]
        try:
            cleaned = LogSegment(lg.dir, info.base_offset, index_bytes=spec.index_bytes,
                                 index_interval=spec.index_interval, active=False, suffix=CLEANED_SUFFIX)
            cleaned.load_tail()
            swap_in(lg, [olds[i] for i in group], [spec.segments[i].size for i in group], cleaned, spec.now_ms)
        except BaseException:
            discard_cleaned(spec, groups[n:])
            raise
        stats.groups.append((info.base_offset, spec.segments[group[-1]].end_offset))


def clean_log(lg: Log, first_dirty: int, now_ms: int, *, force: bool = False,
              stop: threading.Event | None = None) -> tuple[int, CleanStats] | None:
    """One full compaction pass in this process; (new first dirty offset, stats) or None if not due."""
    planned = plan_cleaning(lg, first_dirty, now_ms, force=force)
    if planned is None:
        return None
    spec, olds = planned
    groups, stats = write_cleaned(spec, stop)
    swap_all(lg, spec, olds, groups, stats)
    return spec.dirty_end, stats


# ==== the manager's cleaner ==========================================================================

def _init_worker(flag: Any) -> None:
    global _stop_flag
    _stop_flag = flag


class CleanerHost(Protocol):
    """What the cleaner needs of the log manager that runs it: the logs, and where each log's
    cleaning stopped (``cleaner-offset-checkpoint``). A protocol, so this module does not import the
    manager that imports it."""

    logs: dict[tuple[str, int], Log]
    cleaner_offsets: dict[tuple[str, int], int]


class LogCleaner:
    """A thread that plans and swaps, and a one-process pool doing the CPU-heavy file work.

    ``use_process=False`` does the file work on the thread itself (simpler; costs the event loop
    GIL time while a pass runs).
    """

    def __init__(self, manager: CleanerHost, *, use_process: bool = True) -> None:
        self.manager = manager
        self.use_process = use_process
        self._queue: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._busy: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._mp_stop: Any = None
        self.passes = 0
        self.last_error: str | None = None
        self.last_stats: CleanStats | None = None

    def schedule(self, now_ms: int) -> None:
        """Queue every compacted log not already queued (whether a pass is due is decided later)."""
        if self._stop.is_set():
            return
        for key, lg in list(self.manager.logs.items()):
            if lg.config.compact and key not in self._busy and len(lg.segments) > 1:
                self._busy.add(key)
                self._queue.put(key)
        if self._busy and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="grete-log-cleaner", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            key = self._queue.get()
            if key is None:
                return
            try:
                self.clean_now(key, int(time.time() * 1000))
            except KafkaStorageException:
                pass  # its log dir went offline and said so once
            except OSError as exc:  # the cleaner's own file work: the dir goes offline like any other
                lg = self.manager.logs.get(key)
                if lg is not None:
                    lg.storage_failed(exc)
            except Exception as exc:  # a failed pass must not kill the thread
                self.last_error = f"{key}: {exc}"
                log.exception("compaction of %s-%s failed", *key)
            finally:
                self._busy.discard(key)

    def _write(self, spec: CleanSpec) -> tuple[list[list[int]], CleanStats]:
        pool = self._process_pool() if self.use_process else None
        if pool is None:
            return write_cleaned(spec, self._stop)
        try:
            return pool.submit(write_cleaned, spec).result()
        except BrokenProcessPool as exc:  # the child died (OOM killer, signal): retry on the thread
            log.warning("cleaner process died (%s); compacting on the cleaner thread from now on", exc)
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool, self.use_process = None, False
            return write_cleaned(spec, self._stop)

    def _process_pool(self) -> ProcessPoolExecutor | None:
        if self._pool is None:
            try:
                ctx = multiprocessing.get_context("spawn")  # never fork a process running an event loop
                self._mp_stop = ctx.Event()
                self._pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker,
                                                 initargs=(self._mp_stop,))
            except OSError as exc:  # e.g. no /dev/shm for the semaphore in a restricted sandbox
                log.warning("no cleaner process (%s); compacting on the cleaner thread", exc)
                self.use_process = False
                return None
        return self._pool

    def clean_now(self, key: tuple[str, int], now_ms: int, *, force: bool = False) -> CleanStats | None:
        lg = self.manager.logs.get(key)
        if lg is None or lg.closed or lg.offline is not None:
            return None
        planned = plan_cleaning(lg, self.manager.cleaner_offsets.get(key, 0), now_ms, force=force)
        if planned is None:
            return None
        spec, olds = planned
        try:
            groups, stats = self._write(spec)
            swap_all(lg, spec, olds, groups, stats)
        except CompactionAborted as exc:
            log.info("compaction of %s-%s dropped: %s", key[0], key[1], exc)
            return None
        self.manager.cleaner_offsets[key] = spec.dirty_end
        self.passes += 1
        self.last_stats = stats
        return stats

    def stop(self) -> None:
        self._stop.set()
        if self._mp_stop is not None:
            self._mp_stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
