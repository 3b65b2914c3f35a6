"""Shrinking a log: from its start (DeleteRecords, retention.ms, retention.bytes; whole segments,
never past the high watermark) and from its end (a follower truncating its divergent tail)."""

from __future__ import annotations

import time
from collections.abc import Callable

from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.loader import rebuild_producer_state
from grete.storage.segment import LogSegment
from grete.storage.segmented_log import SegmentedLog, storage_op

# (segment, the segment after it or None) -> delete it?
_Predicate = Callable[[LogSegment, LogSegment | None], bool]


class LogRetention(SegmentedLog):
    # ==== the start: DeleteRecords and retention ==================================================
    @storage_op
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

    @storage_op
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

    def maintenance_due(self, retention: bool) -> bool:
        """Whether :meth:`maintenance` has anything to do: a retention pass, a pending delete (read
        without the lock: one the cleaner adds now waits a pass), a producer that may expire, or a
        flush by time."""
        return bool(retention or self._pending_deletes or self.producer_state.producers
                    or self.config.flush_ms < 2**62)

    @storage_op
    def maintenance(self, now_ms: int, *, retention: bool = True) -> None:
        if self._pending_deletes:
            self.run_pending_deletes(now_ms)
        if retention:
            self.apply_retention(now_ms)
        if not self.producer_state.producers and self.config.flush_ms >= 2**62:
            return  # no producer to expire, no flush by time: nothing else to do
        with self.lock:
            self.producer_state.remove_expired(now_ms)
            if (self._unflushed_messages and self.config.flush_ms < 2**62
                    and now_ms - self._last_flush_ms >= self.config.flush_ms):
                self.flush()

    # ==== the end: truncation (replication) =======================================================
    @storage_op
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

    @storage_op
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
