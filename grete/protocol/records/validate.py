"""Produce-side validation of one partition's records, with Kafka's exact error codes.

Policy (see docs/records.md): the batch *header* is always checked (one ``struct`` unpack and a
CRC32C over the batch in C), which catches every client bug and every flipped bit. The per-record
checks -- null keys on compacted topics, timestamp bounds, record structure -- need Python work per
record, so they run only when the caller passes ``deep=True``: compacted topics, configured
``message.timestamp.before/after.max.ms``, or a strict-validation config.

Check order follows Kafka: ProduceRequest.validateRecords, then UnifiedLog.analyzeAndValidateRecords,
then LogValidator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as codecs
from grete.protocol.records.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    RecordBatch,
    peek_batch_size,
)
from grete.protocol.records.legacy import (
    LEGACY_COMPRESSION_MASK,
    LEGACY_TIMESTAMP_TYPE_MASK,
    MIN_MESSAGE_SIZE,
    decode_message_set,
    iter_entries,
    upconvert_to_v2,
)
from grete.protocol.records.record import Record, build_batch, decode_records

LONG_MAX: Final = (1 << 63) - 1
CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"
ZSTD_MIN_PRODUCE_VERSION: Final = 7
MIN_V2_PRODUCE_VERSION: Final = 3
RECORD_ERRORS_SHOWN: Final = 3

Buffer = bytes | bytearray | memoryview


class RecordValidationError(KafkaError):
    """A rejected produce; ``record_errors`` holds (index in batch, message) for Produce v8+."""

    def __init__(self, code: ErrorCode, message: str,
                 record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(code, message)
        self.record_errors: list[tuple[int, str]] = list(record_errors)


def _fail(code: ErrorCode, message: str) -> RecordValidationError:
    return RecordValidationError(code, message)


def validate_produce_records(
    records: Buffer | None,
    *,
    produce_version: int,
    compacted: bool,
    max_message_bytes: int,
    timestamp_type: str,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
    now_ms: int,
    deep: bool,
    max_uncompressed_bytes: int = codecs.DEFAULT_MAX_OUTPUT,
    topic_partition: str = "",
) -> RecordBatch:
    """Validate one partition's produce payload; return the single v2 batch to append.

    The batch views ``records`` itself, except for legacy (magic 0/1) input and deep-validated
    compressed batches with non-sequential inner offsets: those come back rebuilt in a new buffer.
    Raises RecordValidationError with Kafka's error code; a record's error names ``topic_partition``
    ("topic-index") where Kafka's does.
    """
    buf = records if records is not None else b""
    if len(buf) < LOG_OVERHEAD:
        raise _fail(ErrorCode.INVALID_RECORD, "produce request must carry at least one record batch")
    size = _first_entry_size(buf)
    magic = buf[MAGIC_OFFSET]
    if magic != 2 and produce_version >= MIN_V2_PRODUCE_VERSION:
        raise _fail(ErrorCode.INVALID_RECORD, f"produce v{produce_version} requires magic 2, got magic {magic}")
    if magic in MIN_MESSAGE_SIZE:
        return _validate_legacy(buf, compacted=compacted, topic_partition=topic_partition,
                                max_message_bytes=max_message_bytes,
                                bounds=_bounds(timestamp_type, timestamp_before_max_ms, timestamp_after_max_ms),
                                now_ms=now_ms, max_uncompressed_bytes=max_uncompressed_bytes)
    if magic != 2:
        raise _fail(ErrorCode.CORRUPT_MESSAGE, f"unknown magic {magic}")
    batch = _validate_v2_header(buf, size, produce_version, max_message_bytes)
    bounds = _bounds(timestamp_type, timestamp_before_max_ms, timestamp_after_max_ms)
    if not deep and (bounds is None or _header_within(batch, bounds, now_ms)):
        return batch
    return _validate_v2_records(batch, compacted=compacted, topic_partition=topic_partition, bounds=bounds,
                                now_ms=now_ms, max_uncompressed_bytes=max_uncompressed_bytes)


def _header_within(batch: RecordBatch, bounds: tuple[int, int], now_ms: int) -> bool:
    """True when the header alone shows every record inside a future-only window: no record is
    later than the batch's max timestamp. Kafka 4's default window (after 1 h, before unbounded) is
    then checked without reading a record; anything else, or a batch that may break the window, is
    read record by record for Kafka's per-record errors."""
    before, after = bounds
    return before >= LONG_MAX and batch.max_timestamp - now_ms <= after


def _first_entry_size(buf: Buffer) -> int:
    size = peek_batch_size(buf, 0)
    assert size is not None  # len(buf) >= LOG_OVERHEAD was checked by the caller
    if size - LOG_OVERHEAD < MIN_MESSAGE_SIZE[0]:
        raise _fail(ErrorCode.CORRUPT_MESSAGE, f"record size {size - LOG_OVERHEAD} is less than the minimum overhead")
    if size > len(buf):
        raise _fail(ErrorCode.CORRUPT_MESSAGE,
                    f"illegal batch length: {size} bytes declared, {len(buf)} bytes present")
    return size


def _bounds(timestamp_type: str, before: int, after: int) -> tuple[int, int] | None:
    """The CreateTime window (before, after), or None when no timestamp check applies."""
    if timestamp_type != CREATE_TIME or (before >= LONG_MAX and after >= LONG_MAX):
        return None
    return before, after


# --- v2 ----------------------------------------------------------------------------------------
def _validate_v2_header(buf: Buffer, size: int, produce_version: int, max_message_bytes: int) -> RecordBatch:
    if size < BATCH_OVERHEAD:
        raise _fail(ErrorCode.CORRUPT_MESSAGE, f"record batch is corrupt: {size} bytes is less than the header")
    _check_single_batch(buf, size)
    batch = RecordBatch(buf, 0)
    if batch.compression == codecs.ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        raise _fail(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"produce v{produce_version} cannot carry zstd (needs v{ZSTD_MIN_PRODUCE_VERSION}+)")
    if batch.base_offset != 0:
        raise _fail(ErrorCode.INVALID_RECORD, f"client batch base offset must be 0, got {batch.base_offset}")
    if size > max_message_bytes:
        raise _fail(ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
    if not batch.crc_ok():
        raise _fail(ErrorCode.CORRUPT_MESSAGE,
                    f"record is corrupt (stored crc = {batch.crc}, computed crc = {batch.compute_crc()})")
    _check_v2_fields(batch)
    return batch


def _check_single_batch(buf: Buffer, size: int) -> None:
    if size == len(buf):
        return
    following = peek_batch_size(buf, size)
    if following is not None and following >= LOG_OVERHEAD + MIN_MESSAGE_SIZE[0] and size + following <= len(buf):
        raise _fail(ErrorCode.INVALID_RECORD, "produce request must carry exactly one record batch per partition")
    raise _fail(ErrorCode.CORRUPT_MESSAGE, f"{len(buf) - size} trailing bytes after the record batch")


def _check_v2_fields(batch: RecordBatch) -> None:
    if batch.compression > codecs.ZSTD:
        raise _fail(ErrorCode.CORRUPT_MESSAGE, f"unknown compression type id {batch.compression}")
    if batch.last_offset_delta < 0:
        raise _fail(ErrorCode.INVALID_RECORD, f"batch has an invalid offset range [0, {batch.last_offset_delta}]")
    if batch.records_count <= 0:
        raise _fail(ErrorCode.INVALID_RECORD, f"invalid reported count for record batch: {batch.records_count}")
    if batch.records_count != batch.last_offset_delta + 1:
        raise _fail(ErrorCode.INVALID_RECORD, f"inconsistent batch offset range [0, {batch.last_offset_delta}] "
                    f"and count of records {batch.records_count}")
    if batch.is_control:
        raise _fail(ErrorCode.INVALID_RECORD, "clients are not allowed to write control records")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise _fail(ErrorCode.INVALID_RECORD,
                    f"invalid sequence number {batch.base_sequence} in batch with producerId {batch.producer_id}")
    if batch.timestamp_type == 1:
        raise _fail(ErrorCode.INVALID_TIMESTAMP, "producer should not set timestamp type to LogAppendTime")
    if batch.compression == codecs.LZ4:
        # Kafka's lz4 reader throws a RuntimeException on these, which the produce path answers
        # with UNKNOWN_SERVER_ERROR (not CORRUPT_MESSAGE); storing the batch would leave records a
        # Java consumer cannot read.
        problem = codecs.lz4_descriptor_problem(batch.records_view)
        if problem is not None:
            raise _fail(ErrorCode.UNKNOWN_SERVER_ERROR, problem)


def _validate_v2_records(batch: RecordBatch, *, compacted: bool, topic_partition: str,
                         bounds: tuple[int, int] | None, now_ms: int, max_uncompressed_bytes: int) -> RecordBatch:
    try:
        records = decode_records(batch, max_uncompressed_bytes)
    except KafkaError as exc:
        raise _fail(exc.code, exc.message or exc.code.name) from None
    timestamps = [batch.base_timestamp + r.timestamp_delta for r in records]
    _check_records([r.key for r in records], timestamps, compacted, topic_partition, bounds, now_ms)
    sequential = all(r.offset_delta == i for i, r in enumerate(records))
    if sequential or batch.compression == codecs.NONE:
        return batch
    return _rebuild_sequential(batch, records)


def _rebuild_sequential(batch: RecordBatch, records: list[Record]) -> RecordBatch:
    """Kafka rewrites a compressed batch whose inner offsets are not 0..n-1 (old clients)."""
    fixed = [Record(i, r.timestamp_delta, r.key, r.value, r.headers, r.attributes)
             for i, r in enumerate(records)]
    rebuilt = build_batch(
        fixed, compression=batch.compression, base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp, producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        transactional=batch.is_transactional, partition_leader_epoch=batch.partition_leader_epoch,
        max_timestamp=batch.max_timestamp)
    return RecordBatch(rebuilt, 0)


def _check_records(keys: Sequence[bytes | None], timestamps: Sequence[int], compacted: bool, topic_partition: str,
                   bounds: tuple[int, int] | None, now_ms: int) -> None:
    """Collect per-record errors like LogValidator; raise once with all of them."""
    errors: list[tuple[int, str]] = []
    any_timestamp_error = False
    for index, (key, timestamp) in enumerate(zip(keys, timestamps, strict=True)):
        if compacted and key is None:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                  f"{topic_partition}"))
        elif bounds is not None and timestamp != NO_TIMESTAMP and (
                now_ms - timestamp > bounds[0] or timestamp - now_ms > bounds[1]):
            any_timestamp_error = True
            errors.append((index, f"Timestamp {timestamp} of message is out of range. The timestamp should be "
                                  f"within [{now_ms - bounds[0]}, {now_ms + bounds[1]}]"))
    if not errors:
        return
    if any_timestamp_error:
        raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                    "One or more records have been rejected due to invalid timestamp", errors)
    # Kafka's wording, the first three errors in its RecordError.toString form.
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:RECORD_ERRORS_SHOWN])
    raise RecordValidationError(ErrorCode.INVALID_RECORD,
                                f"One or more records have been rejected due to {len(errors)} record errors "
                                f"in total, and only showing the first three errors at most: [{shown}]", errors)


# --- legacy (Produce v0-2) ---------------------------------------------------------------------
def _validate_legacy(buf: Buffer, *, compacted: bool, topic_partition: str, max_message_bytes: int,
                     bounds: tuple[int, int] | None, now_ms: int, max_uncompressed_bytes: int) -> RecordBatch:
    """Legacy rules, then up-conversion to one v2 batch (always decoded: conversion needs it)."""
    try:
        entries = list(iter_entries(buf))
    except KafkaError as exc:
        raise _fail(exc.code, exc.message or exc.code.name) from None
    magic = buf[entries[0][1] + 4]
    codec = buf[entries[0][1] + 5] & LEGACY_COMPRESSION_MASK
    if codec != codecs.NONE and len(entries) > 1:
        raise _fail(ErrorCode.INVALID_RECORD, "compressed outer record has more than one batch")
    for _, pos, size in entries:
        _check_legacy_entry(buf, pos, size, magic, max_message_bytes)
    try:
        legacy = decode_message_set(buf, max_output=max_uncompressed_bytes)
        batch = RecordBatch(upconvert_to_v2(buf, max_output=max_uncompressed_bytes), 0)
    except KafkaError as exc:
        raise _fail(exc.code, exc.message or exc.code.name) from None
    _check_records([r.key for r in legacy], [r.timestamp for r in legacy], compacted, topic_partition, bounds, now_ms)
    return batch


def _check_legacy_entry(buf: Buffer, pos: int, size: int, magic: int, max_message_bytes: int) -> None:
    entry_magic = buf[pos + 4]
    attributes = buf[pos + 5]
    if entry_magic != magic:
        raise _fail(ErrorCode.INVALID_RECORD, f"batch magic {entry_magic} is not the same as the first batch's {magic}")
    if size + LOG_OVERHEAD > max_message_bytes:
        raise _fail(ErrorCode.MESSAGE_TOO_LARGE,
                    f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes {max_message_bytes}")
    codec = attributes & LEGACY_COMPRESSION_MASK
    if codec == codecs.ZSTD:
        raise _fail(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd requires magic 2")
    if codec > codecs.ZSTD:
        raise _fail(ErrorCode.CORRUPT_MESSAGE, f"unknown compression type id {codec}")
    if magic == 1 and attributes & LEGACY_TIMESTAMP_TYPE_MASK:
        raise _fail(ErrorCode.INVALID_TIMESTAMP, "producer should not set timestamp type to LogAppendTime")
