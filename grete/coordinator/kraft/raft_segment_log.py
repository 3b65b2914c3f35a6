"""The Raft core's log on disk: ``__cluster_metadata-0`` in Kafka's segment format (the storage
layer's Log, as for any partition), seen through the RaftLog protocol.

Every batch is kept exactly as its leader wrote it: a follower appends the fetched bytes (offsets,
epochs, timestamps and CRCs untouched, Kafka's appendAsFollower), and a leader serves the bytes it
has on disk, so a quorum mixing grete and Kafka controllers holds one log byte for byte. Batches the
core builds itself (a grete leader's appends) are encoded here once, as Kafka's KRaft writes them:
keyless metadata records, or one control record, stamped with the leader's epoch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from grete.coordinator.kraft.raft_log import (
    LEADER_CHANGE,
    OffsetAndEpoch,
    RaftBatch,
    before_log,
    empty_log_epoch,
    snapshot_ahead,
)
from grete.coordinator.kraft.raft_snapshots import Snapshots
from grete.protocol.records.batch import RecordBatch, iter_batches
from grete.protocol.records.control import encode_control_key, parse_control_key
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.storage.config import LogConfig
from grete.storage.log import Log

# Bytes per read: Kafka's controller.quorum.fetch.max.size default is 8 MiB; a smaller bound keeps
# one answer's encoding short on the event loop while a follower catches up.
READ_MAX_BYTES = 1024 * 1024


def encode_raft_batch(batch: RaftBatch, timestamp_ms: int) -> bytes:
    """``batch`` in Kafka's v2 format: its own bytes if it has them, else built as KRaft builds them."""
    if batch.raw is not None:
        return batch.raw
    records = [Record(i, 0, None, value) for i, value in enumerate(batch.records)]
    if batch.control:
        records = [Record(offset - batch.base_offset, 0, encode_control_key(control_type), value)
                   for offset, control_type, value in batch.typed_controls()]
    return bytes(build_batch(records, base_offset=batch.base_offset, base_timestamp=timestamp_ms,
                             control=batch.control, partition_leader_epoch=batch.epoch))


def raft_batch(batch: RecordBatch) -> RaftBatch:
    """A stored or fetched batch for the core, its bytes kept."""
    records = decode_records(batch)
    values = tuple(record.value or b"" for record in records)
    types = tuple(parse_control_key(record.key) for record in records) if batch.is_control else ()
    if all(t == LEADER_CHANGE for t in types):
        types = ()  # RaftBatch's default
    return RaftBatch(batch.base_offset, batch.partition_leader_epoch, values, batch.is_control,
                     raw=bytes(batch.bytes_view()), control_types=types)


def raft_batches(data: bytes | bytearray | memoryview | None) -> tuple[RaftBatch, ...]:
    return tuple(raft_batch(batch) for batch in iter_batches(bytes(data or b"")))


class SegmentRaftLog:
    """A RaftLog over the segment log of ``__cluster_metadata-0``. Appends are not flushed here:
    the driver flushes once per input, before anything it sends counts on them."""

    def __init__(self, partition_dir: Path, config: LogConfig | None = None) -> None:
        self.log = Log.open(partition_dir, config or LogConfig())
        self.snapshots = Snapshots(partition_dir)
        latest = self.snapshots.latest()
        if latest is not None and self.log.log_end_offset < latest.offset:
            self.truncate_to_latest_snapshot()  # the log was lost or cut behind its snapshot

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_epoch(self) -> int:
        latest = self.log.epochs.latest_epoch
        return latest if latest > 0 else empty_log_epoch(self)

    def epoch_end_offset(self, epoch: int) -> OffsetAndEpoch:
        found: OffsetAndEpoch | None = None
        entries = self.log.epochs.entries
        for index, (entry_epoch, _start) in enumerate(entries):
            if entry_epoch > epoch:
                break
            end = entries[index + 1][1] if index + 1 < len(entries) else self.end_offset
            found = OffsetAndEpoch(entry_epoch, end)
        return found if found is not None else before_log(self)

    def append(self, batch: RaftBatch) -> None:
        now = int(time.time() * 1000)
        self.log.append_as_follower(encode_raft_batch(batch, now), now_ms=now)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def read(self, offset: int, max_records: int) -> list[RaftBatch]:
        batches: list[RaftBatch] = []
        records = size = 0
        for batch in self.log.batches(offset):
            if batches and (records + batch.last_offset_delta + 1 > max_records or size + batch.size > READ_MAX_BYTES):
                break
            batches.append(raft_batch(batch))
            records += batch.last_offset_delta + 1
            size += batch.size
        return batches

    def control_batches(self) -> Iterator[RaftBatch]:
        """Only control batches are decoded: the metadata records between them are skipped by header."""
        for batch in self.log.batches(self.log.log_start_offset):
            if batch.is_control:
                yield raft_batch(batch)

    # --- snapshots --------------------------------------------------------------------------------
    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return self.snapshots.latest()

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        return self.snapshots.earliest()

    def snapshot_size(self, snapshot: OffsetAndEpoch) -> int | None:
        return self.snapshots.size(snapshot)

    def read_snapshot(self, snapshot: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots.read(snapshot, position, max_bytes)

    def write_snapshot_chunk(self, snapshot: OffsetAndEpoch, position: int, data: bytes) -> int:
        return self.snapshots.append(snapshot, position, data)

    def freeze_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        self.snapshots.freeze(snapshot)

    def truncate_to_latest_snapshot(self) -> bool:
        latest = self.snapshots.latest()
        if latest is None or not snapshot_ahead(self, latest):
            return False
        self.log.truncate_fully_and_start_at(latest.offset)
        self.snapshots.delete_before(latest)
        return True

    def start_at_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        """Let the log start at ``snapshot`` (committed, and this replica's own): the segments wholly
        before it and the older snapshots go (Kafka's deleteBeforeSnapshot)."""
        if snapshot.offset <= self.log.log_start_offset or snapshot.offset > self.log.log_end_offset:
            return
        now = int(time.time() * 1000)
        self.log.high_watermark = max(self.log.high_watermark, snapshot.offset)
        self.log.delete_records_before(snapshot.offset)
        self.log.run_pending_deletes(now, force=True)
        self.snapshots.delete_before(snapshot)

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()
