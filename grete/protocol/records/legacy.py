"""Legacy message sets (magic v0 and v1): decode, encode, up-conversion to v2, down-conversion.

A message set is ``[offset:int64 size:int32 message]*`` with::

    message v0 = crc:uint32 magic:int8 attributes:int8 key:int32-bytes value:int32-bytes
    message v1 = crc:uint32 magic:int8 attributes:int8 timestamp:int64 key value

The CRC is CRC-32 (IEEE, ``zlib.crc32``) over magic..end. A compressed set is one *wrapper* message
whose value is a compressed inner message set: v1 inner offsets are relative (absolute = wrapper
offset - last inner offset + inner offset, KIP-31), v0 inner offsets are absolute.

Only old clients use this (Produce v0-2, Fetch v0-3); grete stores v2 only and converts at the edge.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as codecs
from grete.protocol.records.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RecordBatch,
    peek_batch_size,
    peek_magic,
)
from grete.protocol.records.record import Record, absolute_records, build_batch

MIN_MESSAGE_SIZE: Final[dict[int, int]] = {0: 14, 1: 22}
LEGACY_COMPRESSION_MASK: Final = 0x07
LEGACY_TIMESTAMP_TYPE_MASK: Final = 0x08
ATTRIBUTES_OFFSET: Final = 17  # in an entry: offset(8) size(4) crc(4) magic(1)

_PREFIX = struct.Struct(">qi")
_CRC_MAGIC_ATTRS = struct.Struct(">Ibb")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class LegacyRecord:
    """One (inner) message with its absolute offset; ``timestamp`` is -1 for magic 0."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int = 1
    timestamp_type: int = 0


@dataclass(slots=True)
class _Message:
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


# --- decoding ----------------------------------------------------------------------------------
def _read_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise _corrupt("message truncated inside a length field")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise _corrupt("message field runs past the end of the message")
    return bytes(buf[pos:pos + length]), pos + length


def _parse_message(buf: Buffer, pos: int, size: int) -> _Message:
    """Decode and CRC-check the message of ``size`` bytes at ``pos``."""
    end = pos + size
    crc, magic, attributes = _CRC_MAGIC_ATTRS.unpack_from(buf, pos)
    if magic not in MIN_MESSAGE_SIZE:
        raise _corrupt(f"invalid magic {magic} in a legacy message set")
    if size < MIN_MESSAGE_SIZE[magic]:
        raise _corrupt(f"message of {size} bytes is shorter than the v{magic} minimum")
    if zlib.crc32(memoryview(buf)[pos + 4:end]) != crc:
        raise _corrupt("record is corrupt (stored crc does not match computed crc)")
    pos += 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(buf, pos)
        pos += 8
    key, pos = _read_bytes(buf, pos, end)
    value, pos = _read_bytes(buf, pos, end)
    if pos != end:
        raise _corrupt("message has bytes after its value")
    return _Message(magic, attributes & 0xFF, timestamp, key, value)


def iter_entries(buf: Buffer, pos: int = 0, end: int | None = None,
                 strict: bool = True) -> Iterator[tuple[int, int, int]]:
    """(offset, message position, message size) per entry; a truncated tail raises when ``strict``."""
    limit = len(buf) if end is None else end
    while pos < limit:
        if limit - pos < LOG_OVERHEAD:
            if strict:
                raise _corrupt("truncated message set entry")
            return
        offset, size = _PREFIX.unpack_from(buf, pos)
        if size < MIN_MESSAGE_SIZE[0]:
            raise _corrupt(f"message size {size} is less than the minimum record overhead")
        if pos + LOG_OVERHEAD + size > limit:
            if strict:
                raise _corrupt("message set ends inside a message")
            return
        yield offset, pos + LOG_OVERHEAD, size
        pos += LOG_OVERHEAD + size


def _inner_records(wrapper_offset: int, wrapper: _Message, max_output: int) -> list[LegacyRecord]:
    if wrapper.value is None:
        raise _corrupt("compressed wrapper message without a value")
    codec = wrapper.attributes & LEGACY_COMPRESSION_MASK
    value: bytes = wrapper.value
    if codec == codecs.LZ4 and wrapper.magic == 0:  # v0 writers used a broken header checksum
        value = codecs.lz4_set_header_checksum(value, broken=False)
    data = codecs.decompress(codec, value, max_output)
    log_append = wrapper.magic == 1 and bool(wrapper.attributes & LEGACY_TIMESTAMP_TYPE_MASK)
    inner: list[LegacyRecord] = []
    for offset, pos, size in iter_entries(data):
        message = _parse_message(data, pos, size)
        if message.magic != wrapper.magic:
            raise KafkaError(ErrorCode.INVALID_RECORD, "inner message magic does not match the wrapper's")
        if message.attributes & LEGACY_COMPRESSION_MASK:
            raise KafkaError(ErrorCode.INVALID_RECORD, "inner message claims its own compression")
        timestamp = wrapper.timestamp if log_append else message.timestamp
        inner.append(LegacyRecord(offset, timestamp, message.key, message.value, message.magic,
                                  1 if log_append else 0))
    if not inner:
        raise _corrupt("compressed wrapper message holds no messages")
    if wrapper.magic == 1:  # relative inner offsets: the wrapper carries the last absolute offset
        shift = wrapper_offset - inner[-1].offset
        for record in inner:
            record.offset += shift
    return inner


def decode_message_set(buf: Buffer, *, strict: bool = True,
                       max_output: int = codecs.DEFAULT_MAX_OUTPUT) -> list[LegacyRecord]:
    """Every message of a v0/v1 message set, with compressed wrappers expanded."""
    records: list[LegacyRecord] = []
    for offset, pos, size in iter_entries(buf, strict=strict):
        message = _parse_message(buf, pos, size)
        if message.attributes & LEGACY_COMPRESSION_MASK:
            records.extend(_inner_records(offset, message, max_output))
        else:
            ts_type = 1 if message.magic == 1 and message.attributes & LEGACY_TIMESTAMP_TYPE_MASK else 0
            records.append(LegacyRecord(offset, message.timestamp, message.key, message.value,
                                        message.magic, ts_type))
    return records


def message_set_codec(buf: Buffer) -> int:
    """Compression codec of the first message in a message set (0 when empty)."""
    if len(buf) <= ATTRIBUTES_OFFSET:
        return codecs.NONE
    return int(buf[ATTRIBUTES_OFFSET]) & LEGACY_COMPRESSION_MASK


# --- encoding ----------------------------------------------------------------------------------
def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(data))
        out += data


def encode_message(magic: int, attributes: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One message (crc..value), without the offset/size prefix."""
    body = bytearray((magic & 0xFF, attributes & 0xFF))
    if magic == 1:
        body += _INT64.pack(timestamp)
    _put_bytes(body, key)
    _put_bytes(body, value)
    return _UINT32.pack(zlib.crc32(body)) + bytes(body)


def _entry(out: bytearray, offset: int, message: bytes) -> None:
    out += _PREFIX.pack(offset, len(message))
    out += message


def encode_message_set(records: Sequence[LegacyRecord], magic: int, compression: int = codecs.NONE,
                       timestamp_type: int = 0) -> bytearray:
    """A message set holding ``records`` at their offsets; compressed as one wrapper if asked."""
    if magic not in MIN_MESSAGE_SIZE:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    ts_bit = LEGACY_TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type else 0
    out = bytearray()
    if compression == codecs.NONE:
        for record in records:
            _entry(out, record.offset, encode_message(magic, ts_bit, record.timestamp, record.key, record.value))
        return out
    if not records:
        return out
    inner = bytearray()
    first = records[0].offset
    for record in records:
        inner_offset = record.offset - first if magic == 1 else record.offset
        _entry(inner, inner_offset, encode_message(magic, 0, record.timestamp, record.key, record.value))
    wrapper_ts = max(r.timestamp for r in records) if magic == 1 else NO_TIMESTAMP
    value = codecs.compress(compression, inner)
    if compression == codecs.LZ4 and magic == 0:  # what Java and kafka-python write (and expect) for v0
        value = codecs.lz4_set_header_checksum(value, broken=True)
    _entry(out, records[-1].offset, encode_message(magic, compression | ts_bit, wrapper_ts, None, value))
    return out


# --- conversion --------------------------------------------------------------------------------
def upconvert_to_v2(message_set: Buffer, *, compression: int | None = None, base_offset: int = 0,
                    max_output: int = codecs.DEFAULT_MAX_OUTPUT) -> bytearray:
    """One v2 batch with the messages of a legacy set, offset deltas 0..n-1.

    The codec defaults to the message set's own (Kafka keeps the producer's codec).
    """
    records = decode_message_set(message_set, max_output=max_output)
    codec = message_set_codec(message_set) if compression is None else compression
    if not records:
        raise KafkaError(ErrorCode.INVALID_RECORD, "message set has no messages")
    base_ts = records[0].timestamp
    v2 = [Record(i, r.timestamp - base_ts, r.key, r.value) for i, r in enumerate(records)]
    return build_batch(v2, compression=codec, base_offset=base_offset, base_timestamp=base_ts,
                       max_timestamp=max(r.timestamp for r in records))


def _downconvert_v2(batch: RecordBatch, magic: int) -> bytearray:
    if batch.compression == codecs.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         "zstd batches cannot be down-converted for old fetch versions")
    records = [
        LegacyRecord(r.offset, r.timestamp if magic == 1 else NO_TIMESTAMP, r.key, r.value, magic)
        for r in absolute_records(batch)
    ]
    return encode_message_set(records, magic, batch.compression, batch.timestamp_type)


def downconvert(data: Buffer, magic: int) -> bytes:
    """Rewrite stored batches as a message set of ``magic`` (0 or 1) for Fetch v0-3.

    Batches already at or below ``magic`` pass through; control batches and empty batches are
    dropped (old consumers cannot read them); a truncated tail is dropped like a partial fetch.
    """
    if magic not in MIN_MESSAGE_SIZE:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    out = bytearray()
    pos = 0
    while (size := peek_batch_size(data, pos)) is not None and pos + size <= len(data):
        if size <= ATTRIBUTES_OFFSET:
            raise _corrupt("entry too short to carry a magic byte")
        entry_magic = peek_magic(data, pos)
        if entry_magic <= magic:
            out += data[pos:pos + size]
        elif entry_magic == 2:
            if size < BATCH_OVERHEAD:
                raise _corrupt("record batch is corrupt: shorter than its header")
            batch = RecordBatch(data, pos)
            if not batch.is_control:
                out += _downconvert_v2(batch, magic)
        else:
            legacy = decode_message_set(memoryview(data)[pos:pos + size])
            codec = message_set_codec(memoryview(data)[pos:pos + size])
            for record in legacy:
                record.timestamp = NO_TIMESTAMP
            out += encode_message_set(legacy, magic, codec)
        pos += size
    return bytes(out)

