"""One log segment: a ``.log`` file of batches plus its three indexes."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, NamedTuple

from grete.protocol.records.batch import BATCH_OVERHEAD, LOG_OVERHEAD, RecordBatch
from grete.storage import io
from grete.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from grete.storage.index import IndexError_, OffsetIndex, TimeIndex
from grete.storage.txnindex import TransactionIndex

INT32_MAX: Final = 2**31 - 1
SCAN_CHUNK: Final = 1 << 20
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta (27 bytes)
_PEEK = struct.Struct(">qiibIhi")
_PEEK_SIZE: Final = _PEEK.size
_TS = struct.Struct(">q")


class CorruptSegmentError(Exception):
    """Invalid bytes in a segment that should be whole (below the recovery point)."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt batch at byte {position}: {reason}")
        self.path = path
        self.position = position


class SegmentFile:
    """Owns the fd of a ``.log`` file. Fetch slices keep a reference to it, so the descriptor
    stays open (and the bytes readable, even once unlinked) until the last slice is dropped."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class BatchPos(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    size: int


class LogSegment:
    """Files ``<base>.log``, ``<base>.index``, ``<base>.timeindex`` and ``<base>.txnindex``, where
    ``<base>`` is the segment's first offset as 20 zero-padded digits.

    ``.log`` holds v2 record batches exactly as on the wire, with broker-assigned offsets, back to
    back: nothing else, no header, so Kafka's tools and Fetch's zero-copy slices both read it as is.
    ``suffix`` (``.cleaned``, ``.swap``, ``.deleted``) is appended to all four names while a
    segment is being built by the cleaner, swapped in, or waiting for deletion.
    """

    def __init__(self, directory: Path, base_offset: int, *, index_bytes: int, index_interval: int,
                 active: bool, suffix: str = "", create: bool = False) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.index_interval = index_interval
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.file = SegmentFile(io.open(self._path(LOG_SUFFIX), flags, 0o644))
        self.size = os.fstat(self.file.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset - 1
        self.rolling_base_timestamp: int | None = None
        self.created_ms = int(time.time() * 1000)
        self.bytes_since_index = 0
        self.index_rebuild_needed = create is False and not self._path(INDEX_SUFFIX).exists()
        self.offset_index = OffsetIndex(self._path(INDEX_SUFFIX), base_offset, index_bytes, writable=active)
        self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX), base_offset, index_bytes, writable=active)
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset)
        if not create:
            self._check_indexes()

    # --- paths -------------------------------------------------------------------------------------
    def _path(self, kind: str, suffix: str | None = None) -> Path:
        return segment_file(self.dir, self.base_offset, kind + (self.suffix if suffix is None else suffix))

    @property
    def log_path(self) -> Path:
        return self._path(LOG_SUFFIX)

    @property
    def fd(self) -> int:
        return self.file.fd

    def _check_indexes(self) -> None:
        try:
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check()
        except IndexError_:
            self.index_rebuild_needed = True

    # --- loading -----------------------------------------------------------------------------------
    def load_tail(self) -> None:
        """Find next_offset and the max timestamp by scanning from the last index entry."""
        _, pos = self.offset_index.lookup(2**62)
        ts, off = self.time_index.last_entry()
        if ts >= 0:
            self.max_timestamp, self.offset_of_max_timestamp = ts, off
        first = True
        for bp, batch in self.scan(pos, self.size, full=False):
            if first and bp.position == 0:
                self.rolling_base_timestamp = batch.max_timestamp
            first = False
            self.next_offset = bp.last_offset + 1
            self._note_timestamp(batch.max_timestamp, bp.last_offset)
            self.bytes_since_index = bp.position + bp.size - pos
        if self.size and self.rolling_base_timestamp is None:
            head = io.pread(self.fd, BATCH_OVERHEAD, 0)
            if len(head) == BATCH_OVERHEAD:
                self.rolling_base_timestamp = RecordBatch(head).max_timestamp

    def _note_timestamp(self, max_ts: int, offset: int) -> None:
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = offset

    def scan(self, start: int, end: int, *, full: bool) -> Iterator[tuple[BatchPos, RecordBatch]]:
        return scan_fd(self.fd, start, end, full=full)

    def rebuild(self, on_batch: Callable[[RecordBatch], None] | None = None, *,
                strict: bool = False) -> int:
        """Re-read every batch, validate it, rebuild the indexes; truncate at the first bad byte.

        Returns the number of bytes truncated. ``strict`` raises CorruptSegmentError instead of
        truncating (for segments whose data was already flushed and must not silently shrink).
        """
        was_active = self.offset_index.writable
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset - 1
        self.bytes_since_index = 0
        self.rolling_base_timestamp = None
        valid_end = 0
        file_size = self.size  # _index_append moves self.size along with the valid batches
        expected = self.base_offset
        for bp, batch in self.scan(0, file_size, full=True):
            reason = _invalid(bp, batch, expected, self.base_offset)
            if reason is not None:
                if strict:
                    raise CorruptSegmentError(self.log_path, bp.position, reason)
                break
            self._index_append(bp.position, bp.size, bp.last_offset, batch.max_timestamp)
            if on_batch is not None:
                on_batch(batch)
            expected = bp.last_offset + 1
            valid_end = bp.position + bp.size
        truncated = file_size - valid_end
        if truncated:
            if strict:
                raise CorruptSegmentError(self.log_path, valid_end, "truncated batch")
            io.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self.txn_index.truncate_to(self.next_offset)
        self.index_rebuild_needed = False
        if not was_active:
            self.on_become_inactive()  # closing time-index entry and trimmed files, as after a roll
        return truncated

    # --- appending ---------------------------------------------------------------------------------
    def append(self, data: memoryview | bytes | bytearray, last_offset: int, max_timestamp: int) -> int:
        """Write whole batches; returns the file position they start at."""
        position = self.size
        view = memoryview(data)
        # pwrite at our own size, never the file position: asyncio's sendfile lseek()s the
        # descriptor after serving a fetch from it.
        written = io.pwrite(self.fd, view, position)
        while written < len(view):  # regular files write fully unless the disk fills; be safe
            more = io.pwrite(self.fd, view[written:], position + written)
            if more <= 0:
                raise OSError(f"short write to {self.log_path}")
            written += more
        self._index_append(position, len(view), last_offset, max_timestamp)
        return position

    def _index_append(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if position == 0:
            self.rolling_base_timestamp = max_timestamp
        self.size = position + size
        self.next_offset = last_offset + 1
        self._note_timestamp(max_timestamp, last_offset)
        if self.bytes_since_index > self.index_interval:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += size

    def should_roll(self, incoming: int, last_offset: int, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> bool:
        if self.size == 0:
            return False
        if self.size + incoming > segment_bytes:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        if last_offset - self.base_offset > INT32_MAX:
            return True
        base_ts = self.rolling_base_timestamp
        if base_ts is None or base_ts < 0:
            base_ts = self.created_ms
        return now_ms - base_ts > segment_ms

    def on_become_inactive(self) -> None:
        """Closing time-index entry, then trim both indexes to their entries (Kafka does the same)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()

    # --- reading -----------------------------------------------------------------------------------
    def find_batch(self, offset: int, start: int = 0) -> BatchPos | None:
        """The first batch whose last offset is >= ``offset``, searching from ``start``."""
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, start)
        size_now = self.size
        while size_now - pos >= _PEEK_SIZE:
            head = io.pread(self.fd, _PEEK_SIZE, pos)
            if len(head) < _PEEK_SIZE:
                return None
            base, length, _, _, _, _, delta = _PEEK.unpack(head)
            size = length + LOG_OVERHEAD
            if base + delta >= offset:
                return BatchPos(pos, base, base + delta, size)
            if size < BATCH_OVERHEAD:
                return None
            pos += size
        return None

    def batch_at(self, position: int) -> BatchPos | None:
        """The batch starting at ``position`` (trusted to be a batch boundary), or None."""
        head = io.pread(self.fd, _PEEK_SIZE, position)
        if len(head) < _PEEK_SIZE:
            return None
        base, length, _, _, _, _, delta = _PEEK.unpack(head)
        return BatchPos(position, base, base + delta, length + LOG_OVERHEAD)

    def end_within(self, start: int, limit: int) -> int:
        """Largest whole-batch boundary in (start, limit]; ``start`` if even one batch does not fit."""
        if limit >= self.size:
            return self.size
        _, pos = self.offset_index.lookup_position(limit)
        pos = max(pos, start)
        end = pos if pos > start else start
        while True:
            head = io.pread(self.fd, LOG_OVERHEAD, pos)
            if len(head) < LOG_OVERHEAD:
                return end
            size = int.from_bytes(head[8:12], "big", signed=True) + LOG_OVERHEAD
            if size < BATCH_OVERHEAD or pos + size > limit:
                return end
            pos += size
            end = pos

    def find_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """Position and base offset of the first batch at or after ``start_offset`` whose
        max timestamp is >= ``timestamp``."""
        _, from_offset = self.time_index.lookup(timestamp)
        hit = self.find_batch(max(from_offset, start_offset))
        if hit is None:
            return None
        for bp, batch in self.scan(hit.position, self.size, full=False):
            if batch.max_timestamp >= timestamp and bp.last_offset >= start_offset:
                return bp.position, bp.base_offset
        return None

    def read_batch(self, position: int, size: int) -> RecordBatch:
        return RecordBatch(io.pread(self.fd, size, position))

    @property
    def largest_timestamp(self) -> int:
        """Retention's notion of age: max record timestamp, else the file's mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    # --- maintenance -------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove batches at and after the one containing ``offset``; returns bytes removed."""
        hit = self.find_batch(offset)
        if hit is None:
            return 0
        removed = self.size - hit.position
        io.ftruncate(self.fd, hit.position)
        self.size = hit.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset - 1
        self.bytes_since_index = 0
        self.rolling_base_timestamp = None
        self.load_tail()
        return removed

    def flush(self) -> None:
        io.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.time_index.writable and self.max_timestamp >= 0:
            # Like Kafka, record the segment's max timestamp so a reopened log finds it in the index.
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def release(self) -> None:
        """Close indexes but leave the log fd to whoever still holds fetch slices of it."""
        self.offset_index.close(trim=False)
        self.time_index.close(trim=False)

    def change_suffix(self, new_suffix: str) -> None:
        for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            old = self._path(kind)
            if old.exists():
                io.rename(old, self._path(kind, new_suffix))
        self.txn_index.rename(self._path(TXN_INDEX_SUFFIX, new_suffix))
        self.offset_index.path = self._path(INDEX_SUFFIX, new_suffix)
        self.time_index.path = self._path(TIME_INDEX_SUFFIX, new_suffix)
        self.suffix = new_suffix

    def delete_files(self) -> None:
        self.release()
        for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            self._path(kind).unlink(missing_ok=True)

    def size_bytes(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next={self.next_offset})"


def scan_fd(fd: int, start: int, end: int, *, full: bool) -> Iterator[tuple[BatchPos, RecordBatch]]:
    """Batches of a ``.log`` file in [start, end). ``full`` reads whole batches (CRC checks, record
    access); otherwise only headers are read. Stops silently at a truncated tail, except that a
    ``full`` scan yields the bad spot once (base offset -1) so recovery can report it."""
    buf = b""
    buf_start = start
    pos = start
    while end - pos >= BATCH_OVERHEAD:
        off = pos - buf_start
        if off + BATCH_OVERHEAD > len(buf):
            buf, buf_start, off = io.pread(fd, min(SCAN_CHUNK, end - pos), pos), pos, 0
            if len(buf) < BATCH_OVERHEAD:
                return
        size = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + LOG_OVERHEAD
        if size < BATCH_OVERHEAD or pos + size > end:
            if full:
                yield BatchPos(pos, -1, -1, size), RecordBatch(buf, off)
            return
        if full and off + size > len(buf):
            buf, buf_start, off = io.pread(fd, max(size, min(SCAN_CHUNK, end - pos)), pos), pos, 0
            if len(buf) < size:
                return
        batch = RecordBatch(buf, off)
        yield BatchPos(pos, batch.base_offset, batch.last_offset, size), batch
        pos += size


def _invalid(bp: BatchPos, batch: RecordBatch, expected: int, segment_base: int) -> str | None:
    """Why a batch read back during recovery is not acceptable, or None.

    Compaction leaves gaps between batches, so offsets only have to increase. The base offset
    and the partition leader epoch are outside the CRC (as in Kafka): garbage there that keeps
    offsets increasing cannot be detected.
    """
    if bp.base_offset == -1 and bp.last_offset == -1:
        if bp.size < BATCH_OVERHEAD:
            return f"batch size {bp.size} below the minimum {BATCH_OVERHEAD}"
        return "batch runs past the end of the file"
    if batch.magic != 2:
        return f"unsupported magic {batch.magic}"
    if batch.last_offset_delta < 0 or bp.base_offset < expected:
        return f"offset {bp.base_offset} goes backwards (expected >= {expected})"
    if bp.last_offset - segment_base > INT32_MAX:
        return "offset does not fit the segment's 32-bit relative offsets"
    if not batch.crc_ok():
        return "CRC-32C mismatch"
    return None
