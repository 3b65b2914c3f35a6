"""Log compaction (cleanup.policy=compact): keep the last record of every key.

How one pass over a log works (Kafka's algorithm, section 4.8 of the design chapter):

1. Plan, under the log lock (cheap): the *dirty* part runs from the cleaner checkpoint to the first
   uncleanable offset: the active segment, the first open transaction (LSO) and segments younger
   than min.compaction.lag.ms are never cleaned. Only whole segments take part.
2. Offset map, without the lock: read the dirty segments and remember, for every key, the offset
   of its last record (records of aborted transactions and control records do not count).
3. Copy, without the lock: recopy every segment below the dirty end, in groups that fit one
   segment, into ``<base>.log.cleaned`` (+ indexes), keeping a record only if no later record has
   its key. Aborted records always go. Tombstones and transaction markers go once they sit in an
   already-cleaned segment older than delete.retention.ms. A batch keeps its base offset, last
   offset delta, producer id/epoch and base sequence, so offsets never change and an emptied batch
   that is a producer's last one stays (empty) to carry the producer's state.
4. Swap, under the lock: rename ``.cleaned`` -> ``.swap`` (log file last), old segments ->
   ``.deleted`` (unlinked after file.delete.delay.ms, so in-flight fetch slices stay valid), then
   ``.swap`` -> live. A crash at any point is repaired by Log.open: ``.cleaned`` is deleted,
   a ``.log.swap`` is completed.

The pass runs on one worker thread owned by the LogManager, never on the event loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.storage.files import CLEANED_SUFFIX, SWAP_SUFFIX
from grete.storage.segment import LogSegment

if TYPE_CHECKING:
    from grete.storage.log import Log
    from grete.storage.manager import LogManager

log = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


@dataclass
class CleanPlan:
    first_dirty: int
    dirty_end: int
    segments: list[LogSegment]  # every segment below dirty_end, in order
    sizes: list[int]
    aborted: dict[int, list[tuple[int, int]]]  # producer id -> [(first, last offset)]
    producer_last_offset: dict[int, int]
    now_ms: int
    dirty_bytes: int = 0
    clean_bytes: int = 0

    @property
    def dirty_ratio(self) -> float:
        total = self.dirty_bytes + self.clean_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    batches_removed: int = 0
    seconds: float = 0.0
    groups: list[tuple[int, int]] = field(default_factory=list)


class CompactionAborted(Exception):
    """The log changed under the cleaner (truncation, deletion, close); the pass is dropped."""


def plan_cleaning(lg: Log, first_dirty: int, now_ms: int, *, force: bool = False) -> CleanPlan | None:
    """What a pass over ``lg`` would clean, or None if nothing is due."""
    cfg = lg.config
    with lg.lock:
        segs = list(lg.segments)
        first_dirty = max(first_dirty, lg.log_start_offset)
        end = segs[-1].base_offset  # the active segment is never cleaned
        unstable = lg.producer_state.first_unstable_offset
        if unstable is not None:
            end = min(end, unstable)
        end = min(end, lg.high_watermark)
        if cfg.min_compaction_lag_ms > 0:
            for seg in segs[:-1]:
                if seg.max_timestamp > now_ms - cfg.min_compaction_lag_ms:
                    end = min(end, seg.base_offset)
                    break
        # Only whole segments: the dirty end is the base of the first segment not wholly below it.
        chosen = [s for s in segs[:-1] if _segment_end(segs, s) <= end]
        if not chosen:
            return None
        dirty_end = _segment_end(segs, chosen[-1])
        if dirty_end <= first_dirty and not force:
            return None
        aborted: dict[int, list[tuple[int, int]]] = {}
        for seg in segs:
            for txn in seg.txn_index.entries:
                aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        last_offsets = {pid: e.last_offset for pid, e in lg.producer_state.producers.items()}
        plan = CleanPlan(first_dirty, dirty_end, chosen, [s.size for s in chosen], aborted, last_offsets, now_ms)
    for seg, size in zip(plan.segments, plan.sizes, strict=True):
        if _segment_end(segs, seg) <= first_dirty:
            plan.clean_bytes += size
        else:
            plan.dirty_bytes += size
    if force:
        return plan
    if plan.dirty_bytes and plan.dirty_ratio >= cfg.min_cleanable_dirty_ratio:
        return plan
    first_dirty_seg = next((s for s in plan.segments if _segment_end(segs, s) > first_dirty), None)
    if first_dirty_seg is not None and cfg.max_compaction_lag_ms < 2**62:
        born = first_dirty_seg.rolling_base_timestamp
        if born is not None and born >= 0 and now_ms - born > cfg.max_compaction_lag_ms:
            return plan
    return None


def _segment_end(segs: list[LogSegment], seg: LogSegment) -> int:
    i = segs.index(seg)
    return segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset


def _is_aborted(plan: CleanPlan, batch: RecordBatch) -> bool:
    if not batch.is_transactional or batch.is_control:
        return False
    return any(first <= batch.base_offset <= last for first, last in plan.aborted.get(batch.producer_id, ()))


def _batches(seg: LogSegment, size: int, start_offset: int = 0) -> Iterator[RecordBatch]:
    for bp, batch in seg.scan(0, size, full=True):
        if bp.base_offset < 0:
            raise CompactionAborted(f"{seg.log_path}: unreadable batch at {bp.position}")
        if bp.last_offset >= start_offset:
            yield batch


def build_offset_map(plan: CleanPlan, stop: threading.Event | None = None) -> dict[bytes, int]:
    """key -> offset of its last record in [first_dirty, dirty_end)."""
    offsets: dict[bytes, int] = {}
    for seg, size in zip(plan.segments, plan.sizes, strict=True):
        if seg.next_offset <= plan.first_dirty:
            continue
        for batch in _batches(seg, size, plan.first_dirty):
            if stop is not None and stop.is_set():
                raise CompactionAborted("cleaner stopping")
            if batch.is_control or _is_aborted(plan, batch):
                continue
            base = batch.base_offset
            for rec in decode_records(batch):
                offset = base + rec.offset_delta
                if rec.key is not None and plan.first_dirty <= offset < plan.dirty_end:
                    offsets[rec.key] = offset
    return offsets


def group_segments(plan: CleanPlan, max_bytes: int) -> list[list[int]]:
    """Indexes into plan.segments, grouped so each group's input fits one segment."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, seg in enumerate(plan.segments):
        span_ok = not current or seg.next_offset - plan.segments[current[0]].base_offset <= INT32_MAX
        if current and (size + plan.sizes[i] > max_bytes or not span_ok):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += plan.sizes[i]
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


def clean_group(lg: Log, plan: CleanPlan, group: list[int], offsets: dict[bytes, int],
                stats: CleanStats, stop: threading.Event | None = None) -> LogSegment:
    """Write the cleaned copy of one group of segments as ``<base>.*.cleaned`` files."""
    cfg = lg.config
    first = plan.segments[group[0]]
    out = LogSegment(lg.dir, first.base_offset, index_bytes=cfg.segment_index_bytes,
                     index_interval=cfg.index_interval_bytes, active=True, suffix=CLEANED_SUFFIX, create=True)
    tracker = _TxnTracker()
    horizon = plan.now_ms - cfg.delete_retention_ms
    try:
        for i in group:
            seg, size = plan.segments[i], plan.sizes[i]
            seg_end = plan.segments[i + 1].base_offset if i + 1 < len(plan.segments) else plan.dirty_end
            # Tombstones and markers may only go from segments a previous pass already cleaned.
            drop_deletes = seg_end <= plan.first_dirty and seg.max_timestamp < horizon
            for batch in _batches(seg, size):
                if stop is not None and stop.is_set():
                    raise CompactionAborted("cleaner stopping")
                stats.bytes_read += batch.size
                data = _clean_batch(batch, plan, offsets, drop_deletes, tracker, stats)
                if data is not None:
                    kept = RecordBatch(data)
                    out.append(data, kept.last_offset, kept.max_timestamp)
                    stats.bytes_written += len(data)
        for i in group:  # aborted-transaction entries stay: read_committed fetches still use them
            for txn in plan.segments[i].txn_index.entries:
                out.txn_index.append(txn)
        out.on_become_inactive()
        out.flush()
    except BaseException:
        out.close()
        out.delete_files()
        raise
    return out


def _clean_batch(batch: RecordBatch, plan: CleanPlan, offsets: dict[bytes, int], drop_deletes: bool,
                 tracker: _TxnTracker, stats: CleanStats) -> bytes | bytearray | None:
    """The batch to write (original bytes if untouched), or None to drop it entirely."""
    pid = batch.producer_id
    if batch.is_control:
        if batch.is_transactional and not tracker.marker(pid) and drop_deletes:
            stats.batches_removed += 1
            return None
        return bytes(batch.bytes_view())
    aborted = _is_aborted(plan, batch)
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
    if not kept and not (pid >= 0 and plan.producer_last_offset.get(pid) == batch.last_offset):
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
        cleaned.load_tail()
        lg.segments = segs[:start] + [cleaned] + segs[start + len(olds):]
        lg._bases = [s.base_offset for s in lg.segments]


def clean_log(lg: Log, first_dirty: int, now_ms: int, *, force: bool = False,
              stop: threading.Event | None = None) -> tuple[int, CleanStats] | None:
    """One full compaction pass; returns (new first dirty offset, stats) or None if not due."""
    plan = plan_cleaning(lg, first_dirty, now_ms, force=force)
    if plan is None:
        return None
    started = time.monotonic()
    stats = CleanStats()
    offsets = build_offset_map(plan, stop)
    for group in group_segments(plan, lg.config.segment_bytes):
        olds = [plan.segments[i] for i in group]
        cleaned = clean_group(lg, plan, group, offsets, stats, stop)
        try:
            swap_in(lg, olds, [plan.sizes[i] for i in group], cleaned, now_ms)
        except CompactionAborted:
            cleaned.close()
            cleaned.delete_files()
            raise
        stats.groups.append((olds[0].base_offset, _group_end(plan, group)))
    stats.seconds = time.monotonic() - started
    return plan.dirty_end, stats


def _group_end(plan: CleanPlan, group: list[int]) -> int:
    last = group[-1]
    return plan.segments[last + 1].base_offset if last + 1 < len(plan.segments) else plan.dirty_end


class LogCleaner:
    """One worker thread compacting logs the LogManager hands it (one log at a time)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self._queue: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._busy: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last_error: str | None = None

    def schedule(self, now_ms: int) -> None:
        """Queue every compacted log not already queued (eligibility is decided on the thread)."""
        for key, lg in self.manager.logs.items():
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
            except Exception as exc:  # a failed pass must not kill the thread
                self.last_error = f"{key}: {exc}"
                log.exception("compaction of %s-%s failed", *key)
            finally:
                self._busy.discard(key)

    def clean_now(self, key: tuple[str, int], now_ms: int, *, force: bool = False) -> CleanStats | None:
        lg = self.manager.logs.get(key)
        if lg is None or lg.closed:
            return None
        first_dirty = self.manager.cleaner_offsets.get(key, 0)
        try:
            done = clean_log(lg, first_dirty, now_ms, force=force, stop=self._stop)
        except CompactionAborted as exc:
            log.info("compaction of %s-%s dropped: %s", key[0], key[1], exc)
            return None
        if done is None:
            return None
        self.manager.cleaner_offsets[key] = done[0]
        self.passes += 1
        return done[1]

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
