"""Aborted-transaction index of one segment."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from grete.protocol.records.batch import RecordBatch
from grete.storage import io
from grete.storage.files import atomic_write

_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


# producer id -> [(first offset, marker offset)] of its aborted transactions
AbortedRanges = dict[int, list[tuple[int, int]]]


def aborted_ranges(txns: Iterable[AbortedTxn]) -> AbortedRanges:
    ranges: AbortedRanges = {}
    for txn in txns:
        ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return ranges


def in_aborted_txn(ranges: AbortedRanges, batch: RecordBatch) -> bool:
    """A data batch of an aborted transaction: transactional, of a producer with an abort, between
    that transaction's first offset and its marker (one header read; markers are not in it)."""
    if not batch.is_transactional or batch.is_control:
        return False
    return any(first <= batch.base_offset <= last for first, last in ranges.get(batch.producer_id, ()))


class TransactionIndex:
    """``<base>.txnindex``: 34-byte entries, one per ABORT marker in the segment.

    Entry layout (big-endian): ``version:int16 (0), producerId:int64, firstOffset:int64,
    lastOffset:int64 (the marker's offset), lastStableOffset:int64 (LSO once the txn closed)``.
    The file is created lazily on the first entry. Entries are also kept in memory: they are
    few, and read_committed fetches consult them on every request.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        # Set when the file was unreadable and got dropped: the log replays its batches to refill it.
        self.corrupt = False
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        usable = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is dropped
        for pos in range(0, usable, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            prev = self.entries[-1].last_offset if self.entries else -1
            if version != 0 or not 0 <= first <= last or last <= prev or last < self.base_offset:
                self.entries = []
                self.corrupt = True
                self.path.unlink(missing_ok=True)
                return
            self.entries.append(AbortedTxn(pid, first, last, lso))

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted txn at {txn.last_offset} is before the last entry")
        data = _ENTRY.pack(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
        fd = io.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            io.write(fd, data)
        finally:
            os.close(fd)
        self.entries.append(txn)

    def collect(self, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start, end); ``complete`` once an entry's LSO reaches ``end``."""
        found: list[AbortedTxn] = []
        for txn in self.entries:
            if txn.last_offset >= start and txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.rewrite(keep)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        self.entries = list(entries)
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        data = b"".join(_ENTRY.pack(0, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                        for t in entries)
        atomic_write(self.path, data, sync=False)  # flush() fsyncs it with the segment

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            io.rename(self.path, new_path)
        self.path = new_path

    def flush(self) -> None:
        if self.path.exists():
            fd = io.open(self.path, os.O_RDONLY)
            try:
                io.fsync(fd)
            finally:
                os.close(fd)

    def size_bytes(self) -> int:
        return len(self.entries) * ENTRY_SIZE
