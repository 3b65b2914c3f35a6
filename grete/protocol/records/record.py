"""Records inside a magic v2 batch: decoding, encoding and building whole batches.

Record layout (all varints zig-zag)::

    length:varint attributes:int8 timestampDelta:varlong offsetDelta:varint
    keyLength:varint key valueLength:varint value
    headerCount:varint [headerKeyLength:varint headerKey(utf8) headerValueLength:varint headerValue]*

This module does per-record Python work, so the broker uses it only off the hot path: deep
validation, control records, format conversion, tools and tests.

Malformed record structure raises KafkaError(INVALID_RECORD), as Kafka's ``DefaultRecord.readFrom``
raises ``InvalidRecordException``; an undecodable compressed stream raises CORRUPT_MESSAGE.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as codecs
from grete.protocol.records.batch import (
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
)
from grete.protocol.records.varint import read_varint, read_varlong, write_varint

Header = tuple[str, bytes | None]
Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(slots=True)
class Record:
    """One v2 record with its deltas relative to the batch's baseOffset / baseTimestamp."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class AbsoluteRecord:
    """A record with its absolute offset and timestamp, as a consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, message)


# --- decoding ----------------------------------------------------------------------------------
def _read_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos, end)
    if length < 0:  # Kafka treats every negative length as null
        return None, pos
    if pos + length > end:
        raise _invalid("field runs past the end of the record")
    return bytes(buf[pos:pos + length]), pos + length


def _read_headers(buf: Buffer, pos: int, end: int) -> tuple[list[Header], int]:
    count, pos = read_varint(buf, pos, end)
    if count < 0:
        raise _invalid(f"invalid number of record headers {count}")
    if count > end - pos:
        raise _invalid(f"invalid number of record headers {count}: more than the remaining bytes")
    headers: list[Header] = []
    for _ in range(count):
        key_length, pos = read_varint(buf, pos, end)
        if key_length < 0:
            raise _invalid(f"invalid negative header key size {key_length}")
        if pos + key_length > end:
            raise _invalid("header key runs past the end of the record")
        # surrogateescape: a non-UTF-8 key survives a decode/encode round trip byte for byte
        key = bytes(buf[pos:pos + key_length]).decode("utf-8", "surrogateescape")
        value, pos = _read_bytes(buf, pos + key_length, end)
        headers.append((key, value))
    return headers, pos


def read_record(buf: Buffer, pos: int, limit: int) -> tuple[Record, int]:
    """Decode one record at ``pos`` (not beyond ``limit``); returns (record, next position).

    Deep validation calls this once per record, so single-byte varints (the common case for
    attributes-adjacent fields) are decoded inline instead of through a function call.
    """
    length, pos = read_varint(buf, pos, limit)
    end = pos + length
    if length < 1 or end > limit:
        raise _invalid(f"invalid record size {length} with {limit - pos} bytes remaining")
    attributes = buf[pos]
    pos += 1
    if pos < end and (byte := buf[pos]) < 0x80:
        timestamp_delta = (byte >> 1) ^ -(byte & 1)
        pos += 1
    else:
        timestamp_delta, pos = read_varlong(buf, pos, end)
    if pos < end and (byte := buf[pos]) < 0x80:
        offset_delta = (byte >> 1) ^ -(byte & 1)
        pos += 1
    else:
        offset_delta, pos = read_varint(buf, pos, end)
    key, pos = _read_bytes(buf, pos, end)
    value, pos = _read_bytes(buf, pos, end)
    if pos < end and buf[pos] == 0:  # no headers: the usual case
        headers: list[Header] = []
        pos += 1
    else:
        headers, pos = _read_headers(buf, pos, end)
    if pos != end:
        raise _invalid(f"invalid record size: expected {length} bytes, read {length - (end - pos)}")
    return Record(offset_delta, timestamp_delta, key, value, headers, attributes), end


def parse_records(data: Buffer, count: int) -> list[Record]:
    """Decode exactly ``count`` records filling all of ``data`` (an uncompressed record stream)."""
    records: list[Record] = []
    pos = 0
    limit = len(data)
    for _ in range(count):
        if pos >= limit:
            raise _invalid(f"incorrect declared batch size: {count} records declared, {len(records)} found")
        record, pos = read_record(data, pos, limit)
        records.append(record)
    if pos != limit:
        raise _invalid(f"incorrect declared batch size: {limit - pos} bytes remain after {count} records")
    return records


def uncompressed_records(batch: RecordBatch, max_output: int = codecs.DEFAULT_MAX_OUTPUT) -> Buffer:
    """The batch's record stream, decompressed if needed (no copy when uncompressed)."""
    if batch.magic != 2:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"not a v2 record batch (magic {batch.magic})")
    if batch.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch is corrupt: shorter than its header")
    view = batch.records_view
    if batch.compression == codecs.NONE:
        return view
    return codecs.decompress(batch.compression, view, max_output)


def decode_records(batch: RecordBatch, max_output: int = codecs.DEFAULT_MAX_OUTPUT) -> list[Record]:
    """All records of a v2 batch, decompressing as needed."""
    return parse_records(uncompressed_records(batch, max_output), batch.records_count)


def absolute_records(batch: RecordBatch, max_output: int = codecs.DEFAULT_MAX_OUTPUT) -> list[AbsoluteRecord]:
    """Records with absolute offsets and timestamps (LogAppendTime batches use maxTimestamp)."""
    log_append = batch.timestamp_type == 1
    return [
        AbsoluteRecord(
            batch.base_offset + r.offset_delta,
            batch.max_timestamp if log_append else batch.base_timestamp + r.timestamp_delta,
            r.key, r.value, r.headers,
        )
        for r in decode_records(batch, max_output)
    ]


# --- encoding ----------------------------------------------------------------------------------
def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def write_record(out: bytearray, record: Record) -> None:
    body = bytearray()
    body.append(record.attributes & 0xFF)
    write_varint(body, record.timestamp_delta)
    write_varint(body, record.offset_delta)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    write_varint(body, len(record.headers))
    for key, value in record.headers:
        _write_bytes(body, key.encode("utf-8", "surrogateescape"))
        _write_bytes(body, value)
    write_varint(out, len(body))
    out += body


def encode_records(records: Iterable[Record]) -> bytearray:
    """The uncompressed record stream for ``records``."""
    out = bytearray()
    for record in records:
        write_record(out, record)
    return out


def build_batch(
    records: Sequence[Record],
    *,
    compression: int = codecs.NONE,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
) -> bytearray:
    """A complete, CRC-valid v2 batch holding ``records`` (compressed as one stream if asked).

    ``base_timestamp`` defaults to now (or -1 for an empty batch); ``max_timestamp`` to the largest
    record timestamp; ``last_offset_delta`` to the last record's offset delta.
    """
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000) if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = (base_timestamp + max(r.timestamp_delta for r in records)) if records else NO_TIMESTAMP
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    body: Buffer = encode_records(records)
    if compression != codecs.NONE:
        body = codecs.compress(compression, body)
    attributes = ((compression & COMPRESSION_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
                  | (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0))
    return batch_from_body(body, len(records), attributes=attributes, base_offset=base_offset,
                           base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                           last_offset_delta=last_offset_delta, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           partition_leader_epoch=partition_leader_epoch)


def batch_from_body(body: Buffer, count: int, *, base_timestamp: int, max_timestamp: int, last_offset_delta: int,
                    attributes: int = 0, base_offset: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                    base_sequence: int = -1, partition_leader_epoch: int = -1) -> bytearray:
    """A CRC-valid v2 batch around an already encoded (and, per ``attributes``, compressed) record
    stream of ``count`` records."""
    out = bytearray(_HEADER.pack(
        base_offset, BATCH_OVERHEAD - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        count))
    out += body
    RecordBatch(out, 0).rewrite_crc()
    return out


def simple_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                   timestamp_step: int = 0) -> list[Record]:
    """Records with offset deltas 0..n-1: a convenience for tools and tests."""
    return [Record(i, i * timestamp_step, None if keys is None else keys[i], value)
            for i, value in enumerate(values)]
