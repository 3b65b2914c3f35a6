"""Zig-zag varints as used *inside* v2 records (protobuf style, signed).

Not to be confused with the protocol's unsigned varints for flexible versions (compact lengths):
record fields are always zig-zag encoded, so -1 (null) is the single byte 0x01.

Decoding errors are INVALID_RECORD: Kafka wraps a bad varint inside a record as
``InvalidRecordException`` ("Found invalid record structure").
"""

from __future__ import annotations

from typing import Final

from grete.protocol.errors import ErrorCode, KafkaError

_MAX_VARINT_BYTES: Final = 5
_MAX_VARLONG_BYTES: Final = 10
_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

Buffer = bytes | bytearray | memoryview


def zigzag(value: int) -> int:
    """Map a signed int onto an unsigned one so small magnitudes stay short."""
    return (value << 1) ^ (value >> 63)


def unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (int32 or int64 range) as a zig-zag varint."""
    raw = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    raw = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


def _read_raw(buf: Buffer, pos: int, limit: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= limit:
            raise KafkaError(ErrorCode.INVALID_RECORD, "varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, pos
        shift += 7
    raise KafkaError(ErrorCode.INVALID_RECORD, f"varint longer than {max_bytes} bytes")


def read_varint(buf: Buffer, pos: int, limit: int | None = None) -> tuple[int, int]:
    """Decode a 32-bit zig-zag varint at ``pos``; returns (value, next position)."""
    end = len(buf) if limit is None else limit
    if pos < end and (byte := buf[pos]) < 0x80:  # fast path: most record fields fit one byte
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _read_raw(buf, pos, end, _MAX_VARINT_BYTES)
    value = unzigzag(raw)
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise KafkaError(ErrorCode.INVALID_RECORD, "varint out of int32 range")
    return value, pos


def read_varlong(buf: Buffer, pos: int, limit: int | None = None) -> tuple[int, int]:
    """Decode a 64-bit zig-zag varlong at ``pos``; returns (value, next position)."""
    end = len(buf) if limit is None else limit
    if pos < end and (byte := buf[pos]) < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _read_raw(buf, pos, end, _MAX_VARLONG_BYTES)
    value = unzigzag(raw)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise KafkaError(ErrorCode.INVALID_RECORD, "varlong out of int64 range")
    return value, pos
