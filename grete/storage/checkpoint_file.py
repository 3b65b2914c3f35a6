"""KRaft snapshot files (``bootstrap.checkpoint`` and ``__cluster_metadata-0/<offset>-<epoch>.checkpoint``)
byte for byte as Kafka 4.3.1 writes them.

A snapshot is a run of ordinary v2 record batches, uncompressed, offsets from 0, every batch's
partition leader epoch the snapshot's epoch, no producer id/epoch/sequence, CreateTime:

* a control batch opening with a SnapshotHeaderRecord (SNAPSHOT_HEADER), followed in the same batch
  by any other control records the writer puts first (Kafka's RecordsSnapshotWriter: KRaftVersionRecord
  and, for a dynamic quorum, VotersRecord);
* data batches of metadata records (values already framed as MetadataRecordSerde frames them), each
  batch at most ``MAX_BATCH_SIZE`` bytes;
* a control batch with the SnapshotFooterRecord (SNAPSHOT_FOOTER).

Each batch is stamped with the clock when it is started and its records carry that timestamp
(timestamp delta 0), as Kafka's BatchAccumulator does. ``bootstrap.checkpoint`` is what Kafka's
BatchFileWriter writes (header timestamp 0, no other control records); a snapshot in the metadata
log dir is frozen read-only (mode 0400), as Kafka's FileRawSnapshotWriter leaves it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from grete.protocol.codec import Message
from grete.protocol.errors import KafkaError
from grete.protocol.metadata import SnapshotFooterRecord, SnapshotHeaderRecord
from grete.protocol.metadata_frame import CONTROL_VALUES, decode_control_value, encode_control_value
from grete.protocol.records.batch import RecordBatch, iter_batches, peek_batch_size
from grete.protocol.records.control import ControlType, encode_control_key, parse_control_key
from grete.protocol.records.record import Record, build_batch, decode_records, encode_records
from grete.storage.files import atomic_write, fsync_dir

BOOTSTRAP_CHECKPOINT: Final = "bootstrap.checkpoint"
CHECKPOINT_SUFFIX: Final = ".checkpoint"
PART_SUFFIX: Final = ".part"
CLUSTER_METADATA_DIR: Final = "__cluster_metadata-0"
# KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the batch limit of the metadata log and its snapshots.
MAX_BATCH_SIZE: Final = 8 * 1024 * 1024
_BATCH_OVERHEAD: Final = 61
_CONTROL_TYPES: Final = {cls: control_type for control_type, cls in CONTROL_VALUES.items()}

Clock = Callable[[], int]


class CheckpointError(Exception):
    """A file that is not a complete Kafka snapshot; the message names the file."""


def now_ms() -> int:
    return int(time.time() * 1000)


def snapshot_file_name(end_offset: int, epoch: int) -> str:
    """Kafka's Snapshots.filenameFromSnapshotId: ``%020d-%010d.checkpoint``."""
    return f"{end_offset:020d}-{epoch:010d}{CHECKPOINT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a snapshot file name; None for any other name."""
    stem = name.removesuffix(CHECKPOINT_SUFFIX)
    offset, sep, epoch = stem.partition("-")
    if stem == name or not sep or len(offset) != 20 or len(epoch) != 10 or not (offset + epoch).isdigit():
        return None
    return int(offset), int(epoch)


# --- writing ---------------------------------------------------------------------------------------

def encode_checkpoint(records: Iterable[bytes], *, epoch: int = 0, last_contained_log_timestamp: int = 0,
                      leading_control: Sequence[Message] = (), clock: Clock = now_ms,
                      max_batch_size: int = MAX_BATCH_SIZE) -> bytes:
    """The bytes of a snapshot holding ``records`` (framed metadata record values), with the header
    batch carrying ``leading_control`` (KRaftVersionRecord, VotersRecord) after the header."""
    header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_timestamp)
    out = bytearray()
    offset = _append_control(out, [header, *leading_control], offset=0, epoch=epoch, clock=clock)
    for chunk in _batches(records, max_batch_size):
        out += build_batch(chunk, base_offset=offset, base_timestamp=clock(), partition_leader_epoch=epoch)
        offset += len(chunk)
    _append_control(out, [SnapshotFooterRecord(version=0)], offset=offset, epoch=epoch, clock=clock)
    return bytes(out)


def _append_control(out: bytearray, messages: Sequence[Message], *, offset: int, epoch: int, clock: Clock) -> int:
    records = [Record(i, 0, encode_control_key(_CONTROL_TYPES[type(m)]), encode_control_value(m))
               for i, m in enumerate(messages)]
    out += build_batch(records, base_offset=offset, base_timestamp=clock(), control=True,
                       partition_leader_epoch=epoch)
    return offset + len(records)


def _batches(values: Iterable[bytes], max_batch_size: int) -> Iterable[list[Record]]:
    """Records with offset deltas from 0 per batch; a new batch when the next one would not fit."""
    batch: list[Record] = []
    size = _BATCH_OVERHEAD
    for value in values:
        record = Record(len(batch), 0, None, value)
        needed = len(encode_records([record]))
        if batch and size + needed > max_batch_size:
            yield batch
            batch, size = [], _BATCH_OVERHEAD
            record = Record(0, 0, None, value)
        batch.append(record)
        size += needed
    if batch:
        yield batch


def write_bootstrap_checkpoint(directory: Path, records: Iterable[bytes], *, clock: Clock = now_ms) -> Path:
    """``bootstrap.checkpoint`` as Kafka's BootstrapDirectory writes it (via a ``.tmp`` file)."""
    path = directory / BOOTSTRAP_CHECKPOINT
    atomic_write(path, encode_checkpoint(records, clock=clock))
    return path


def write_snapshot(partition_dir: Path, end_offset: int, epoch: int, records: Iterable[bytes], *,
                   last_contained_log_timestamp: int, leading_control: Sequence[Message] = (),
                   clock: Clock = now_ms) -> Path:
    """A frozen snapshot ``<end offset>-<epoch>.checkpoint`` in the metadata partition directory:
    written to a ``.part`` file, fsynced, made read-only, then renamed, as Kafka freezes one."""
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / snapshot_file_name(end_offset, epoch)
    part = path.with_name(path.name + PART_SUFFIX)
    data = encode_checkpoint(records, epoch=epoch, last_contained_log_timestamp=last_contained_log_timestamp,
                             leading_control=leading_control, clock=clock)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(part, 0o400)
    os.replace(part, path)
    fsync_dir(partition_dir)
    return path


# --- reading ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class SnapshotRecord:
    """One record of a snapshot: a control message (decoded) or a metadata record value (bytes)."""

    offset: int
    timestamp: int
    control: Message | None = None
    value: bytes | None = None


@dataclass(slots=True)
class Checkpoint:
    header: SnapshotHeaderRecord
    footer: SnapshotFooterRecord
    control: list[Message] = field(default_factory=list)  # the header batch's records after the header
    records: list[SnapshotRecord] = field(default_factory=list)  # data records, in offset order
    batches: list[RecordBatch] = field(default_factory=list)

    @property
    def values(self) -> list[bytes]:
        return [r.value for r in self.records if r.value is not None]


def read_checkpoint(path: Path) -> Checkpoint:
    """Read and check a snapshot file; CheckpointError (naming the file) if it is not a complete one."""
    return decode_checkpoint(path.read_bytes(), str(path))


def decode_checkpoint(data: bytes, name: str = "snapshot") -> Checkpoint:
    batches = _whole_batches(data, name)
    if not batches:
        raise CheckpointError(f"{name}: no record batch")
    try:
        first = [_read(b, name) for b in batches]
    except KafkaError as exc:
        raise CheckpointError(f"{name}: {exc}") from None
    opening, closing = first[0], first[-1]
    if len(batches) < 2 or not batches[0].is_control or not batches[-1].is_control:
        raise CheckpointError(f"{name}: a snapshot opens and ends with a control batch")
    header, footer = opening[0].control, closing[-1].control
    if not isinstance(header, SnapshotHeaderRecord):
        raise CheckpointError(f"{name}: the first record is not a SnapshotHeaderRecord")
    if not isinstance(footer, SnapshotFooterRecord) or len(closing) != 1:
        raise CheckpointError(f"{name}: the last batch is not a lone SnapshotFooterRecord")
    middle = [r for records in first[1:-1] for r in records]
    if any(r.control is not None for r in middle):
        raise CheckpointError(f"{name}: control records between the header and the footer batch")
    control = [r.control for r in opening[1:] if r.control is not None]
    return Checkpoint(header, footer, control, middle, batches)


def decode_checkpoint_header(first_batch: bytes, name: str = "snapshot") -> SnapshotHeaderRecord:
    """The SnapshotHeaderRecord of a snapshot's first batch (its timestamp, without reading the rest)."""
    batches = _whole_batches(first_batch, name)
    try:
        header = _read(batches[0], name)[0].control if batches and batches[0].is_control else None
    except (KafkaError, IndexError):
        header = None
    if not isinstance(header, SnapshotHeaderRecord):
        raise CheckpointError(f"{name}: the first record is not a SnapshotHeaderRecord")
    return header


def _whole_batches(data: bytes, name: str) -> list[RecordBatch]:
    batches, pos = [], 0
    for batch in iter_batches(data):
        if batch.magic != 2 or batch.compute_crc() != batch.crc:
            raise CheckpointError(f"{name}: corrupt record batch at byte {batch.pos} (magic or CRC)")
        batches.append(batch)
        pos = batch.pos + batch.size
    if pos != len(data):
        size = peek_batch_size(data, pos)
        raise CheckpointError(f"{name}: {len(data) - pos} trailing byte(s) at {pos} are not a whole batch"
                              + (f" (declared size {size})" if size is not None else ""))
    return batches


def _read(batch: RecordBatch, name: str) -> list[SnapshotRecord]:
    out = []
    for record in decode_records(batch):
        offset, timestamp = batch.base_offset + record.offset_delta, batch.base_timestamp + record.timestamp_delta
        if not batch.is_control:
            out.append(SnapshotRecord(offset, timestamp, value=record.value))
            continue
        control_type = parse_control_key(record.key)
        if control_type not in CONTROL_VALUES or record.value is None:
            raise CheckpointError(f"{name}: control record type {control_type} at offset {offset} "
                                  "does not belong in a snapshot")
        out.append(SnapshotRecord(offset, timestamp, control=decode_control_value(control_type, record.value)))
    return out


def control_type_of(message: Message) -> ControlType:
    """The control record type that carries ``message``."""
    return ControlType(_CONTROL_TYPES[type(message)])
