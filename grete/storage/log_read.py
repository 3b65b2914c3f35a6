"""Reading a log's segments: the whole batches a fetch gets (as file slices, which the broker sends
with sendfile), every batch of a range (tests, tools, the cleaner), the aborted transactions of a
range, offsets by timestamp."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass

from grete.protocol.records.batch import BATCH_OVERHEAD, RecordBatch
from grete.storage import io
from grete.storage.segment import BatchPos, LogSegment, SegmentFile
from grete.storage.timestamps import exact_offset_for_timestamp
from grete.storage.txnindex import AbortedTxn


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


class NextPositions:
    """A consumer's next fetch starts where its last one ended. Remembering (offset -> segment,
    position) for those ends skips the index search for sequential readers; every hit is
    confirmed by re-reading the batch header, so truncation or compaction cannot mislead it."""

    MAX = 4096

    def __init__(self) -> None:
        self._positions: dict[int, tuple[LogSegment, int]] = {}

    def clear(self) -> None:
        self._positions.clear()

    def find(self, seg: LogSegment, offset: int) -> BatchPos | None:
        cached = self._positions.get(offset)
        if cached is None or cached[0] is not seg or cached[1] + BATCH_OVERHEAD > seg.size:
            return None
        hit = seg.batch_at(cached[1])
        return hit if hit is not None and hit.base_offset == offset else None

    def remember(self, seg: LogSegment, end: int) -> None:
        if end >= seg.size:
            next_offset = seg.next_offset  # a tail reader: the next append lands right here
        else:
            nxt = seg.batch_at(end)
            if nxt is None:
                return
            next_offset = nxt.base_offset
        if len(self._positions) >= self.MAX:
            self._positions.clear()
        self._positions[next_offset] = (seg, end)


def read_batches(segments: list[LogSegment], bases: list[int], offset: int, max_bytes: int, bound: int,
                 min_one: bool, positions: NextPositions) -> ReadResult:
    """Whole batches of ``segments`` (starting at ``bases``) from the one containing ``offset``, up
    to ``max_bytes`` (at least one batch when ``min_one``), never reaching ``bound``."""
    empty = ReadResult([], 0, offset)
    if offset >= bound:
        return empty
    i = max(bisect.bisect_right(bases, offset) - 1, 0)
    for seg in segments[i:]:
        if seg.base_offset >= bound:
            return empty
        hit = positions.find(seg, offset) or seg.find_batch(offset)
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
        positions.remember(seg, end)
        return ReadResult([FileSlice(seg.fd, hit.position, size, seg.file)], size, hit.base_offset)
    return empty


def batches_between(segments: list[LogSegment], start: int, stop: int) -> Iterator[RecordBatch]:
    """Every batch of ``segments`` overlapping [start, stop), read whole."""
    for seg in segments:
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


def aborted_txns_between(segments: list[LogSegment], bases: list[int], start_offset: int,
                         end_offset: int) -> list[AbortedTxn]:
    """The transaction index's entries of aborted txns overlapping [start_offset, end_offset)."""
    out: list[AbortedTxn] = []
    i = max(bisect.bisect_right(bases, start_offset) - 1, 0)
    for seg in segments[i:]:
        found, complete = seg.txn_index.collect(start_offset, end_offset)
        out.extend(found)
        if complete:
            break
    return out


def offset_for_timestamp(segments: list[LogSegment], timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
    """First (offset, timestamp) with timestamp >= ``timestamp``, or None."""
    for seg in segments:
        if seg.max_timestamp < timestamp:
            continue
        found = seg.find_timestamp(timestamp, log_start_offset)
        if found is None:
            continue
        position, _ = found
        batch = seg.read_batch(position, _batch_size_at(seg, position))
        exact = exact_offset_for_timestamp(batch, timestamp, log_start_offset)
        if exact is not None:
            return exact
    return None


def offset_of_max_timestamp(segments: list[LogSegment]) -> tuple[int, int]:
    """(offset, timestamp) of the largest timestamp in ``segments``; (-1, -1) if there is none."""
    best = (-1, -1)
    for seg in segments:
        if seg.max_timestamp > best[1]:
            best = (seg.offset_of_max_timestamp, seg.max_timestamp)
    return best


def _batch_size_at(seg: LogSegment, position: int) -> int:
    head = io.pread(seg.fd, 12, position)
    return int.from_bytes(head[8:12], "big", signed=True) + 12


def legacy_offsets_before(segments: list[LogSegment], timestamp: int, max_count: int, log_start_offset: int,
                          log_end_offset: int, now_ms: int) -> list[int]:
    """ListOffsets v0's answer, Kafka's legacyFetchOffsetsBefore: each segment's base offset (not below
    the log start) with the time its file was last written, and the log end offset now if the last
    segment holds anything; from the latest of those written at or before ``timestamp`` (-1: the
    last, -2: the first) back, at most ``max_count`` offsets, highest first."""
    points = [(max(seg.base_offset, log_start_offset), int(os.stat(seg.log_path).st_mtime * 1000))
              for seg in segments]
    if segments and segments[-1].size > 0:
        points.append((log_end_offset, now_ms))
    if timestamp == -1:
        start = len(points) - 1
    elif timestamp == -2:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    count = max(min(max_count, start + 1), 0)
    return sorted((points[start - j][0] for j in range(count)), reverse=True)
