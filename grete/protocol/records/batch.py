"""Magic v2 record batches as lazy views over a buffer.

Layout (all big-endian; offsets from the start of the batch)::

    0  baseOffset            int64   assigned by the broker; clients send 0
    8  batchLength           int32   bytes after this field (total size - 12)
    12 partitionLeaderEpoch  int32   set by the leader; NOT covered by the CRC
    16 magic                 int8    2
    17 crc                   uint32  CRC-32C of bytes 21..end
    21 attributes            int16   0-2 codec, 3 timestamp type, 4 transactional, 5 control,
                                     6 hasDeleteHorizonMs
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records               (compressed as one stream when the codec is not none)

Only the 61-byte header is ever parsed on the hot path: one ``Struct.unpack_from``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

import crc32c

BATCH_OVERHEAD: Final = 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
MAX_TIMESTAMP_OFFSET: Final = 35
PARTITION_LEADER_EPOCH_OFFSET: Final = 12

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_TIMESTAMP: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class RecordBatch:
    """Header fields of one v2 batch, read without touching its records.

    ``buf`` must hold the whole batch from ``pos``; the view keeps a reference to it, so
    patching methods write through to the underlying buffer.
    """

    __slots__ = (
        "buf", "pos", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "base_sequence", "records_count",
    )

    buf: bytes | bytearray | memoryview
    pos: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = _HEADER.unpack_from(buf, pos)
        self.buf = buf
        self.pos = pos

    # --- derived header facts -------------------------------------------------------------
    @property
    def size(self) -> int:
        """Total bytes of the batch, including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def records_view(self) -> memoryview:
        """The (possibly compressed) records section, without copying."""
        start = self.pos + BATCH_OVERHEAD
        return memoryview(self.buf)[start:self.pos + self.size]

    def bytes_view(self) -> memoryview:
        return memoryview(self.buf)[self.pos:self.pos + self.size]

    # --- integrity --------------------------------------------------------------------------
    def compute_crc(self) -> int:
        view = memoryview(self.buf)[self.pos + ATTRIBUTES_OFFSET:self.pos + self.size]
        return int(crc32c.crc32c(view))

    def crc_ok(self) -> bool:
        return self.compute_crc() == self.crc

    # --- in-place patching ------------------------------------------------------------------
    def set_base_offset(self, offset: int) -> None:
        """Outside the CRC: no recomputation."""
        _INT64.pack_into(self.buf, self.pos, offset)
        self.base_offset = offset

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Outside the CRC: no recomputation."""
        _INT32.pack_into(self.buf, self.pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
        self.partition_leader_epoch = epoch

    def set_log_append_time(self, timestamp_ms: int) -> None:
        """Stamp LogAppendTime: sets the timestamp-type bit and maxTimestamp, then re-CRCs."""
        self.attributes |= TIMESTAMP_TYPE_MASK
        _INT16.pack_into(self.buf, self.pos + ATTRIBUTES_OFFSET, self.attributes)
        _INT64.pack_into(self.buf, self.pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
        self.max_timestamp = timestamp_ms
        self.rewrite_crc()

    def rewrite_crc(self) -> None:
        self.crc = self.compute_crc()
        _UINT32.pack_into(self.buf, self.pos + CRC_OFFSET, self.crc)

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, size={self.size}, magic={self.magic}, "
                f"count={self.records_count}, last_offset_delta={self.last_offset_delta}, "
                f"attributes={self.attributes:#x}, producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, base_sequence={self.base_sequence})")


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: wraps from Int32.MAX to 0."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


def peek_batch_size(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Size of the batch at ``pos`` (12 + batchLength), or None if fewer than 12 bytes remain.

    Works for any magic: v0/v1 message sets share the offset + size prefix.
    """
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, length = _PREFIX.unpack_from(buf, pos)
    return int(length) + LOG_OVERHEAD


def peek_magic(buf: bytes | bytearray | memoryview, pos: int) -> int:
    return int(buf[pos + MAGIC_OFFSET])


def iter_batches(buf: bytes | bytearray | memoryview, pos: int = 0,
                 end: int | None = None) -> Iterator[RecordBatch]:
    """Iterate whole v2 batches in ``buf[pos:end]``; stops at a truncated tail.

    Callers that must detect garbage (recovery, produce validation) use the validators in
    ``grete.protocol.records.validate``; this is the fast path over trusted bytes.
    """
    limit = len(buf) if end is None else end
    while limit - pos >= BATCH_OVERHEAD:
        _, length = _PREFIX.unpack_from(buf, pos)
        size = length + LOG_OVERHEAD
        if length < BATCH_OVERHEAD - LOG_OVERHEAD or pos + size > limit:
            return
        yield RecordBatch(buf, pos)
        pos += size
