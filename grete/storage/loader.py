"""Loading and recovering one partition directory (Kafka's LogLoader).

``Log.open`` hands a fresh, empty ``Log`` shell's parts to ``LogLoader.load``, which returns the
segments and offsets to start from. Producer-state rebuilding is shared with truncation
(``rebuild_producer_state``), as Kafka's ``UnifiedLog.rebuildProducerState`` is.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from pathlib import Path

from grete.protocol.records.batch import RecordBatch
from grete.storage import io
from grete.storage.config import LogConfig
from grete.storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TMP_SUFFIX,
    parse_offset_name,
)
from grete.storage.leader_epoch import LeaderEpochCache
from grete.storage.producer_state import ProducerStateManager
from grete.storage.segment import CorruptSegmentError, LogSegment

log = logging.getLogger(__name__)


@dataclass
class LogOffline(Exception):
    """Raised by Log.open when a segment that must be whole is corrupt: never serve it."""

    path: Path
    position: int
    reason: str = field(default="")

    def __str__(self) -> str:
        return f"{self.path}: corrupt at byte {self.position}: {self.reason}"


@dataclass
class LoadedLog:
    """What a load produced: the segments (last one active and writable) and where to start."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    recovered: bool  # segments were rescanned: the caller flushes them before serving


def new_segment(directory: Path, config: LogConfig, base: int, *, active: bool, create: bool,
                suffix: str = "") -> LogSegment:
    return LogSegment(directory, base, index_bytes=config.segment_index_bytes,
                      index_interval=config.index_interval_bytes, active=active, suffix=suffix,
                      create=create)


class LogLoader:
    """Finishes interrupted work (temp files, cleaner swaps, pending deletes), opens the
    segments, rescans those past the recovery point (all of them after an unclean shutdown),
    and rebuilds the leader-epoch cache and producer state to match the log end."""

    def __init__(self, directory: Path, config: LogConfig, epochs: LeaderEpochCache,
                 producer_state: ProducerStateManager, *, name: str, clean_shutdown: bool,
                 recovery_point: int, log_start_offset: int | None, now_ms: int) -> None:
        self.dir = directory
        self.config = config
        self.epochs = epochs
        self.producer_state = producer_state
        self.name = name  # "<topic>-<partition>" for log lines
        self.clean = clean_shutdown
        self.recovery_point = recovery_point
        self.start = log_start_offset
        self.now_ms = now_ms

    def _segment(self, base: int, *, active: bool, create: bool, suffix: str = "") -> LogSegment:
        return new_segment(self.dir, self.config, base, active=active, create=create, suffix=suffix)

    def load(self) -> LoadedLog:
        self._clean_up_leftovers()
        bases = sorted(b for b in (parse_offset_name(n) for n in io.listdir(self.dir)
                                   if n.endswith(LOG_SUFFIX)) if b is not None)
        segs = [self._segment(b, active=(i == len(bases) - 1), create=False) for i, b in enumerate(bases)]
        first_unflushed = first_unflushed_index(bases, self.recovery_point) if not self.clean else len(bases)
        try:
            for seg in segs[:first_unflushed]:
                if seg.index_rebuild_needed:  # flushed data: must be whole, or the partition goes offline
                    seg.rebuild(strict=True)
                else:
                    seg.load_tail()
        except CorruptSegmentError as exc:
            for s in segs:
                s.close()
            log.error("partition %s is offline: %s", self.name, exc)
            raise LogOffline(exc.path, exc.position, str(exc)) from exc
        segs = self._recover(segs, first_unflushed)
        if not segs:
            segs = [self._segment(self.start if self.start is not None else 0, active=True, create=True)]
        segs[-1].offset_index.make_writable()
        segs[-1].time_index.make_writable()
        leo = segs[-1].next_offset
        start = min(max(self.start or 0, segs[0].base_offset), leo)
        if self.epochs.corrupt:
            self._rebuild_epochs(segs)
        # Not written now (Kafka's LogLoader: truncateFromEndAsyncFlush): the next change writes the
        # whole cache, and entries the file keeps past the log end are dropped again by the next load.
        # A restart so rewrites no checkpoint whose partition takes its leader epoch back unchanged.
        self.epochs.truncate_from_end(leo, persist=False)
        self.epochs.truncate_from_start(start)
        rebuild_producer_state(segs, self.producer_state, self.now_ms, self.clean)
        recovered = first_unflushed < len(bases)
        recovery_point = leo if recovered or self.clean else max(min(self.recovery_point, leo), 0)
        return LoadedLog(segs, start, recovery_point, recovered)

    def _recover(self, segs: list[LogSegment], first: int) -> list[LogSegment]:
        for i in range(first, len(segs)):
            seg = segs[i]
            truncated = seg.rebuild(on_batch=self._note_epoch)
            if truncated:
                log.warning("%s: truncated %d invalid bytes at position %d during recovery",
                            seg.log_path, truncated, seg.size)
                for later in segs[i + 1:]:
                    log.warning("%s: deleted after corruption in an earlier segment", later.log_path)
                    later.close()
                    later.delete_files()
                segs = segs[:i + 1]
                break
        # A trailing empty segment whose base is past its predecessor's end is legitimate (roll).
        return segs

    def _rebuild_epochs(self, segs: list[LogSegment]) -> None:
        """leader-epoch-checkpoint was unreadable: the batch headers carry the same facts."""
        log.warning("%s: rebuilding the leader-epoch cache from batch headers", self.dir)
        self.epochs.entries = []
        for seg in segs:
            for _, batch in seg.scan(0, seg.size, full=False):
                self._note_epoch(batch)
        self.epochs.corrupt = False
        self.epochs.flush()

    def _note_epoch(self, batch: RecordBatch) -> None:
        if batch.partition_leader_epoch >= 0:
            self.epochs.assign(batch.partition_leader_epoch, batch.base_offset, persist=False)

    def _clean_up_leftovers(self) -> None:
        """Temp files go; interrupted cleaner swaps are completed; pending deletes are finished."""
        for name in io.listdir(self.dir):
            if name.endswith((TMP_SUFFIX, CLEANED_SUFFIX, DELETED_SUFFIX)):
                (self.dir / name).unlink(missing_ok=True)
        for name in sorted(io.listdir(self.dir)):
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = parse_offset_name(name)
                if base is not None:
                    self._finish_swap(base)
        for name in io.listdir(self.dir):
            if name.endswith(SWAP_SUFFIX):  # index swaps whose log never made it: rebuilt instead
                (self.dir / name).unlink(missing_ok=True)

    def _finish_swap(self, base: int) -> None:
        swap = self._segment(base, active=False, create=False, suffix=SWAP_SUFFIX)
        swap.rebuild()
        end = swap.next_offset
        for name in io.listdir(self.dir):
            other = parse_offset_name(name)
            if other is not None and base <= other < end and name.endswith(LOG_SUFFIX):
                old = self._segment(other, active=False, create=False)
                old.close()
                old.delete_files()
        swap.on_become_inactive()
        swap.change_suffix("")
        swap.close()
        log.info("%s: completed an interrupted segment swap", swap.log_path)


def first_unflushed_index(bases: list[int], recovery_point: int) -> int:
    """Index of the segment holding the recovery point: it and all later ones get rescanned."""
    idx = bisect.bisect_right(bases, recovery_point) - 1
    return max(idx, 0)


def rebuild_producer_state(segments: list[LogSegment], psm: ProducerStateManager, now_ms: int,
                           clean: bool) -> None:
    """Newest usable snapshot, then a replay of the batches after it up to the log end."""
    leo = segments[-1].next_offset
    psm.delete_snapshots(above=leo)
    # A dropped (corrupt) txn index is refilled by replaying from a snapshot before it.
    refill = min((s.base_offset for s in segments if s.txn_index.corrupt), default=leo)
    candidates = [o for o in psm.snapshot_offsets() if segments[0].base_offset <= o <= refill]
    loaded = False
    while candidates and not loaded:
        loaded = psm.load_snapshot(candidates.pop(), now_ms)
    if not loaded:
        psm.reset(segments[0].base_offset)
    if psm.map_end_offset < leo:
        _replay(segments, psm, psm.map_end_offset)
    psm.remove_expired(now_ms)
    if not clean or not loaded or psm.map_end_offset != leo:
        psm.map_end_offset = leo
        psm.take_snapshot()
    for seg in segments:
        seg.txn_index.corrupt = False


def _replay(segments: list[LogSegment], psm: ProducerStateManager, start: int) -> None:
    """Producer state from batch headers (markers read whole), and missing txn-index entries."""
    bases = [s.base_offset for s in segments]
    i = max(bisect.bisect_right(bases, start) - 1, 0)
    for seg in segments[i:]:
        hit = seg.find_batch(start)
        if hit is None:
            continue
        for bp, batch in seg.scan(hit.position, seg.size, full=False):
            if bp.last_offset < start or batch.producer_id < 0:
                psm.map_end_offset = max(psm.map_end_offset, bp.last_offset + 1)
                continue
            if batch.is_control:
                batch = seg.read_batch(bp.position, bp.size)
            done = psm.update(batch)
            if done is not None and done.aborted:
                if all(t.last_offset != done.last_offset for t in seg.txn_index.entries):
                    seg.txn_index.append(psm.aborted_entry(done))


__all__ = ["LoadedLog", "LogLoader", "LogOffline", "first_unflushed_index", "new_segment",
           "rebuild_producer_state"]
