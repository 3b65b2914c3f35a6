"""The snapshots of ``__cluster_metadata-0`` on disk, as Kafka's KafkaMetadataLog keeps them.

A snapshot ``<end offset>-<epoch>.checkpoint`` holds the state of the metadata at its end offset (the
records that rebuild it, checkpoint_file's format); once one exists, the log before it may go. They
come from two places: this replica's own state (``write``), or its leader's snapshot fetched with
FetchSnapshot in chunks (``append`` to a ``.checkpoint.part`` file, then ``freeze``). The bootstrap
snapshot (0, 0) the format step writes is one of them too, and never replicated.

Cleaning is Kafka's: while there are two snapshots or more, the oldest goes (and the log start moves
to the next one) when it is older than ``metadata.max.retention.ms`` or the log and snapshots
together are over ``metadata.max.retention.bytes``; the latest snapshot always stays.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grete.coordinator.kraft.raft_log import OffsetAndEpoch
from grete.protocol.codec import Message
from grete.protocol.records.batch import LOG_OVERHEAD, peek_batch_size
from grete.storage.checkpoint_file import (
    CHECKPOINT_SUFFIX,
    PART_SUFFIX,
    CheckpointError,
    decode_checkpoint_header,
    parse_snapshot_file_name,
    read_checkpoint,
    snapshot_file_name,
    write_snapshot,
)
from grete.storage.files import fsync_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a replica snapshots its state and what it keeps (Kafka's defaults)."""

    max_bytes_between: int = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
    max_interval_ms: int = 3_600_000  # metadata.log.max.snapshot.interval.ms (0: never by time)
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes (-1: no limit)
    retention_ms: int = 604_800_000  # metadata.max.retention.ms (-1: no limit)

class Snapshots:
    def __init__(self, partition_dir: Path) -> None:
        self.dir = partition_dir
        for stale in partition_dir.glob(f"*{CHECKPOINT_SUFFIX}{PART_SUFFIX}"):
            stale.unlink()  # a fetch or a write a crash interrupted: started again when needed
        names = (parse_snapshot_file_name(path.name) for path in partition_dir.glob(f"*{CHECKPOINT_SUFFIX}"))
        self._ids = sorted((OffsetAndEpoch(found[1], found[0]) for found in names if found is not None), key=_by_offset)

    # --- which there are --------------------------------------------------------------------------
    @property
    def ids(self) -> list[OffsetAndEpoch]:
        """Frozen snapshots by end offset."""
        return list(self._ids)

    def latest(self) -> OffsetAndEpoch | None:
        return self._ids[-1] if self._ids else None

    def earliest(self) -> OffsetAndEpoch | None:
        return self._ids[0] if self._ids else None

    def path(self, snapshot: OffsetAndEpoch) -> Path:
        return self.dir / snapshot_file_name(snapshot.offset, snapshot.epoch)

    def size(self, snapshot: OffsetAndEpoch) -> int | None:
        if snapshot not in self._ids:
            return None
        try:
            return self.path(snapshot).stat().st_size
        except FileNotFoundError:
            return None

    # --- reading ----------------------------------------------------------------------------------
    def read(self, snapshot: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        with self.path(snapshot).open("rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def load(self, snapshot: OffsetAndEpoch) -> tuple[list[Message], list[bytes]]:
        """(the control records after its header, its metadata record values); CheckpointError
        naming the file when it is not a whole snapshot."""
        checkpoint = read_checkpoint(self.path(snapshot))
        return checkpoint.control, checkpoint.values

    def last_contained_timestamp(self, snapshot: OffsetAndEpoch) -> int | None:
        """Its header's LastContainedLogTimestamp, read from its first batch alone."""
        try:
            with self.path(snapshot).open("rb") as f:
                prefix = f.read(LOG_OVERHEAD)
                size = peek_batch_size(prefix, 0)
                first = prefix + f.read(size - LOG_OVERHEAD) if size is not None else b""
            header = decode_checkpoint_header(first)
        except (CheckpointError, OSError):
            return None
        return header.last_contained_log_timestamp

    # --- writing ----------------------------------------------------------------------------------
    def write(self, snapshot: OffsetAndEpoch, values: Iterable[bytes], leading_control: Sequence[Message],
              last_contained_timestamp: int) -> Path:
        """This replica's state at ``snapshot`` (its records, with the voter set's control records
        first for a dynamic quorum), written whole, then frozen and listed."""
        path = self.write_file(snapshot, values, leading_control, last_contained_timestamp)
        self.add(snapshot)
        return path

    def write_file(self, snapshot: OffsetAndEpoch, values: Iterable[bytes], leading_control: Sequence[Message],
                   last_contained_timestamp: int) -> Path:
        """The file alone (it touches nothing else here, so another thread may write it); ``add`` lists it."""
        return write_snapshot(self.dir, snapshot.offset, snapshot.epoch, values,
                              last_contained_log_timestamp=last_contained_timestamp, leading_control=leading_control)

    def append(self, snapshot: OffsetAndEpoch, position: int, data: bytes) -> int:
        """A chunk of a snapshot being fetched, at ``position`` (0 starts it over); its size now."""
        part = self.path(snapshot).with_name(self.path(snapshot).name + PART_SUFFIX)
        with part.open("r+b" if position and part.exists() else "wb") as f:
            f.seek(position)
            f.truncate()
            f.write(data)
            return f.tell()

    def freeze(self, snapshot: OffsetAndEpoch) -> None:
        """The fetched snapshot is whole: fsynced, read-only, renamed into place (Kafka's freeze)."""
        path = self.path(snapshot)
        part = path.with_name(path.name + PART_SUFFIX)
        fd = os.open(part, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(part, 0o400)
        os.replace(part, path)
        fsync_dir(self.dir)
        self.add(snapshot)

    def add(self, snapshot: OffsetAndEpoch) -> None:
        if snapshot not in self._ids:
            self._ids.append(snapshot)
            self._ids.sort(key=_by_offset)

    # --- forgetting -------------------------------------------------------------------------------
    def delete_before(self, snapshot: OffsetAndEpoch) -> None:
        """Every snapshot older than ``snapshot`` (the log no longer starts before it)."""
        for old in [s for s in self._ids if _by_offset(s) < _by_offset(snapshot)]:
            self._ids.remove(old)
            try:
                self.path(old).unlink()
            except FileNotFoundError:
                pass
            log.info("deleted metadata snapshot %s (the log now starts at %d)", self.path(old), snapshot.offset)

    def cleanable(self, log_bytes: int, retention_bytes: int, retention_ms: int, now_ms: int) -> OffsetAndEpoch | None:
        """The snapshot the log may now start at (Kafka's cleanSnapshots): the oldest snapshots go,
        one after the other, while older than the retention time or over the retention size, as long
        as another snapshot follows; None when nothing goes."""
        sizes = {s: self.size(s) or 0 for s in self._ids}
        total = log_bytes + sum(sizes.values())
        start: OffsetAndEpoch | None = None
        for snapshot, following in zip(self._ids, self._ids[1:], strict=False):
            timestamp = self.last_contained_timestamp(snapshot)
            too_old = retention_ms >= 0 and timestamp is not None and now_ms - timestamp > retention_ms
            too_big = retention_bytes >= 0 and total > retention_bytes
            if not (too_old or too_big):
                break
            total -= sizes[snapshot]
            start = following
        return start


def _by_offset(snapshot: OffsetAndEpoch) -> tuple[int, int]:
    return snapshot.offset, snapshot.epoch
