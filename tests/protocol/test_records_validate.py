"""Produce validation: one test per applicable row of Kafka's validation table (exact error codes)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from grete.protocol.errors import ErrorCode
from grete.protocol.records import compression as c
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.legacy import LegacyRecord, encode_message, encode_message_set
from grete.protocol.records.record import Record, build_batch, decode_records, simple_records
from grete.protocol.records.validate import LONG_MAX, RecordValidationError, validate_produce_records

NOW = 1_700_000_000_000
DEFAULTS: dict[str, Any] = dict(
    produce_version=9, compacted=False, max_message_bytes=1_048_588, timestamp_type="CreateTime",
    timestamp_before_max_ms=LONG_MAX, timestamp_after_max_ms=LONG_MAX, now_ms=NOW, deep=False)


def validate(buf: bytes | bytearray | memoryview | None, **overrides: Any) -> RecordBatch:
    return validate_produce_records(None if buf is None else memoryview(buf), **{**DEFAULTS, **overrides})


def rejects(buf: bytes | bytearray | memoryview | None, code: ErrorCode, **overrides: Any) -> RecordValidationError:
    with pytest.raises(RecordValidationError) as info:
        validate(buf, **overrides)
    assert info.value.code == code, info.value
    return info.value


def good(n: int = 3, codec: int = c.NONE, **kwargs: Any) -> bytearray:
    return build_batch(simple_records([b"value-%d" % i for i in range(n)], keys=[b"k"] * n),
                       compression=codec, base_timestamp=NOW, **kwargs)


def patched(buf: bytearray, offset: int, fmt: str, value: int) -> bytearray:
    """Change a header field and re-CRC, so only the field itself is wrong."""
    struct.pack_into(fmt, buf, offset, value)
    RecordBatch(buf, 0).rewrite_crc()
    return buf


# --- accepted -----------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
@pytest.mark.parametrize("deep", [False, True])
def test_valid_batch_returns_a_view_over_the_input(codec: int, deep: bool) -> None:
    buf = good(5, codec, producer_id=3, producer_epoch=0, base_sequence=0)
    batch = validate(buf, deep=deep)
    assert bytes(batch.bytes_view()) == bytes(buf)
    batch.set_base_offset(77)  # writes through to the request buffer: no copy was made
    assert struct.unpack_from(">q", buf, 0)[0] == 77


def test_kafka_python_produced_batch_is_accepted() -> None:
    builder = DefaultRecordBatchBuilder(2, 1, False, 12, 0, 0, 1 << 20)
    for i in range(10):
        builder.append(i, NOW + i, b"k", b"v%d" % i, [])
    validate(bytes(builder.build()), deep=True)


def test_max_message_bytes_boundary_is_inclusive() -> None:
    buf = good()
    validate(buf, max_message_bytes=len(buf))


# --- ProduceRequest.validateRecords ---------------------------------------------------------------
@pytest.mark.parametrize("payload", [None, b"", b"\x00" * 11])
def test_no_batch_is_invalid_record(payload: bytes | None) -> None:
    rejects(payload, ErrorCode.INVALID_RECORD)


def test_v3_plus_requires_magic_2() -> None:
    legacy = encode_message_set([LegacyRecord(0, NOW, b"k", b"v")], 1)
    rejects(legacy, ErrorCode.INVALID_RECORD, produce_version=3)


def test_more_than_one_batch_is_invalid_record() -> None:
    rejects(good() + good(), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("version", [3, 6])
def test_zstd_before_produce_v7_is_unsupported_compression_type(version: int) -> None:
    rejects(good(codec=c.ZSTD), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, produce_version=version)
    validate(good(codec=c.ZSTD), produce_version=7)


# --- UnifiedLog.analyzeAndValidateRecords ------------------------------------------------------------
def test_nonzero_base_offset_is_invalid_record() -> None:
    rejects(good(base_offset=5), ErrorCode.INVALID_RECORD)


def test_too_large_is_message_too_large() -> None:
    buf = good(10)
    rejects(buf, ErrorCode.MESSAGE_TOO_LARGE, max_message_bytes=len(buf) - 1)


def test_crc_mismatch_is_corrupt_message() -> None:
    buf = good()
    buf[-1] ^= 0x01
    rejects(buf, ErrorCode.CORRUPT_MESSAGE)


def test_batch_shorter_than_header_is_corrupt_message() -> None:
    buf = good()[:40]
    struct.pack_into(">i", buf, 8, 40 - 12)
    rejects(buf, ErrorCode.CORRUPT_MESSAGE)


def test_length_beyond_buffer_is_corrupt_message() -> None:
    rejects(good()[:-1], ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("trailer", [b"\x00", b"\x00" * 11, b"\x00" * 8 + b"\x00\x00\x01\x00" + b"\x00" * 20])
def test_trailing_garbage_is_corrupt_message(trailer: bytes) -> None:
    rejects(good() + trailer, ErrorCode.CORRUPT_MESSAGE)


def test_length_below_minimum_is_corrupt_message() -> None:
    buf = good()
    struct.pack_into(">i", buf, 8, 5)
    rejects(buf, ErrorCode.CORRUPT_MESSAGE)


def test_unknown_codec_is_corrupt_message() -> None:
    rejects(patched(good(), 21, ">h", 6), ErrorCode.CORRUPT_MESSAGE)


def lz4_batch_with_descriptor(flg: int | None = None, bd: int | None = None) -> bytearray:
    """An lz4 batch whose frame descriptor bytes are changed, with a correct header checksum and CRC."""
    buf = good(5, c.LZ4)
    frame = bytearray(buf[61:])  # the records region: one lz4 frame
    if flg is not None:
        frame[4] = flg
    if bd is not None:
        frame[5] = bd
    buf[61:] = c.lz4_set_header_checksum(frame, broken=False)
    RecordBatch(buf, 0).rewrite_crc()
    return buf


@pytest.mark.parametrize("deep", [False, True])
def test_lz4_linked_blocks_are_refused_like_kafka(deep: bool) -> None:
    # Found by compat-tests/kafkajs: KafkaJS with an lz4js codec writes FLG 0x40 (version 01, blocks
    # not marked independent). Kafka 3.9/4.3 answer Produce with UNKNOWN_SERVER_ERROR ("Dependent
    # block stream is unsupported"); grete stored the batch.
    buf = lz4_batch_with_descriptor(flg=0x50)  # grete's own 0x70 less BLOCK_INDEPENDENCE
    assert c.decompress(c.LZ4, buf[61:]) == c.decompress(c.LZ4, good(5, c.LZ4)[61:])  # valid LZ4 all the same
    error = rejects(buf, ErrorCode.UNKNOWN_SERVER_ERROR, deep=deep)
    assert "BLOCK_INDEPENDENCE" in str(error)


@pytest.mark.parametrize(("flg", "bd", "why"), [
    (0x71, None, "reserved"),  # dictionary id / reserved bits
    (0xB0, None, "version 2"),
    (None, 0x30, "block size value 3"),
    (None, 0x41, "BD reserved"),
])
def test_lz4_descriptor_kafka_cannot_read_is_refused(flg: int | None, bd: int | None, why: str) -> None:
    assert why in str(rejects(lz4_batch_with_descriptor(flg, bd), ErrorCode.UNKNOWN_SERVER_ERROR))


def test_lz4_descriptor_with_independent_blocks_is_accepted() -> None:
    frame = good(5, c.LZ4)[61:]
    assert frame[4] & 0x20 and c.lz4_descriptor_problem(frame) is None
    validate(good(5, c.LZ4), deep=True)
    # Java's own writer: FLG 0x60 (no block checksums), BD 0x40 (64 KB blocks).
    assert c.lz4_descriptor_problem(b"\x04\x22\x4d\x18\x60\x40\x82") is None


# --- LogValidator.validateBatch ------------------------------------------------------------------
def test_negative_last_offset_delta_is_invalid_record() -> None:
    rejects(patched(good(), 23, ">i", -1), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("count", [0, -3])
def test_non_positive_count_is_invalid_record(count: int) -> None:
    rejects(patched(good(), 57, ">i", count), ErrorCode.INVALID_RECORD)


def test_count_not_matching_last_offset_delta_is_invalid_record() -> None:
    rejects(patched(good(3), 23, ">i", 3), ErrorCode.INVALID_RECORD)
    rejects(patched(good(3), 57, ">i", 2), ErrorCode.INVALID_RECORD)


def test_control_batch_from_client_is_invalid_record() -> None:
    rejects(good(control=True, transactional=True, producer_id=1, producer_epoch=0, base_sequence=0),
            ErrorCode.INVALID_RECORD)


def test_producer_id_without_sequence_is_invalid_record() -> None:
    rejects(good(producer_id=9, producer_epoch=0, base_sequence=-1), ErrorCode.INVALID_RECORD)


def test_producer_set_log_append_time_is_invalid_timestamp() -> None:
    rejects(good(timestamp_type=1), ErrorCode.INVALID_TIMESTAMP)


# --- per-record checks (deep) --------------------------------------------------------------------
def test_null_key_on_compacted_topic_is_invalid_record_with_record_errors() -> None:
    buf = build_batch(simple_records([b"a", b"b", b"c"], keys=[b"k", None, None]), base_timestamp=NOW)
    error = rejects(buf, ErrorCode.INVALID_RECORD, compacted=True, deep=True)
    assert [index for index, _ in error.record_errors] == [1, 2]
    validate(buf, compacted=False, deep=True)
    validate(buf, compacted=True, deep=False)  # the broker must pass deep=True for compacted topics


@pytest.mark.parametrize("codec", [c.NONE, c.LZ4])
def test_timestamp_out_of_bounds_is_invalid_timestamp(codec: int) -> None:
    records = [Record(0, 0, b"k", b"now"), Record(1, -10_001, b"k", b"old"), Record(2, 5_001, b"k", b"future")]
    buf = build_batch(records, compression=codec, base_timestamp=NOW)
    error = rejects(buf, ErrorCode.INVALID_TIMESTAMP, timestamp_before_max_ms=10_000,
                    timestamp_after_max_ms=5_000, deep=True)
    assert [index for index, _ in error.record_errors] == [1, 2]
    validate(buf, timestamp_before_max_ms=10_001, timestamp_after_max_ms=5_001, deep=True)
    validate(buf, timestamp_type="LogAppendTime", timestamp_before_max_ms=1, timestamp_after_max_ms=1, deep=True)


def test_timestamp_errors_win_over_key_errors() -> None:
    records = [Record(0, 0, None, b"no key"), Record(1, -100_000, b"k", b"old")]
    error = rejects(build_batch(records, base_timestamp=NOW), ErrorCode.INVALID_TIMESTAMP, compacted=True,
                    timestamp_before_max_ms=1000, deep=True)
    assert [index for index, _ in error.record_errors] == [0, 1]


def test_no_timestamp_is_never_out_of_bounds() -> None:
    buf = build_batch([Record(0, 0, b"k", b"v")], base_timestamp=-1)
    validate(buf, timestamp_before_max_ms=1, timestamp_after_max_ms=1, deep=True)


def test_malformed_record_is_invalid_record_when_deep() -> None:
    buf = good(2)
    buf[61] = 0x7E  # first record's length varint: 63 bytes, more than the record has
    RecordBatch(buf, 0).rewrite_crc()
    validate(buf)  # header-only: not looked at
    rejects(buf, ErrorCode.INVALID_RECORD, deep=True)


def test_fewer_records_than_declared_is_invalid_record_when_deep() -> None:
    records = simple_records([b"a", b"b"])
    buf = build_batch(records, base_timestamp=NOW, last_offset_delta=2)
    rejects(patched(buf, 57, ">i", 3), ErrorCode.INVALID_RECORD, deep=True)


def test_undecodable_compressed_stream_is_corrupt_message_when_deep() -> None:
    buf = good(3, c.GZIP)
    buf[-8] ^= 0xFF  # inside the gzip trailer CRC
    RecordBatch(buf, 0).rewrite_crc()
    rejects(buf, ErrorCode.CORRUPT_MESSAGE, deep=True)


def test_decompression_bomb_is_corrupt_message_when_deep() -> None:
    buf = build_batch([Record(0, 0, b"k", bytes(5_000_000))], compression=c.ZSTD, base_timestamp=NOW)
    rejects(buf, ErrorCode.CORRUPT_MESSAGE, deep=True, max_uncompressed_bytes=1_000_000)


def test_compressed_non_sequential_inner_offsets_are_rewritten() -> None:
    records = [Record(0, 0, b"k", b"a"), Record(5, 1, b"k", b"b"), Record(2, 2, b"k", b"c")]
    buf = build_batch(records, compression=c.GZIP, base_timestamp=NOW, last_offset_delta=2)
    batch = validate(buf, deep=True)
    assert batch.buf is not buf and batch.crc_ok()
    assert [(r.offset_delta, r.value) for r in decode_records(batch)] == [(0, b"a"), (1, b"b"), (2, b"c")]
    plain = build_batch(records, base_timestamp=NOW, last_offset_delta=2)
    kept = validate(plain, deep=True)  # uncompressed: kept as is, like Kafka
    assert bytes(kept.bytes_view()) == bytes(plain)
    assert [r.offset_delta for r in decode_records(kept)] == [0, 5, 2]


# --- legacy produce (v0-2) -------------------------------------------------------------------------
def legacy_set(magic: int = 1, codec: int = c.NONE, n: int = 3, **kwargs: Any) -> bytearray:
    records = [LegacyRecord(i, NOW + i if magic else -1, b"k%d" % i, b"v%d" % i, magic) for i in range(n)]
    return encode_message_set(records, magic, codec, **kwargs)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4])
def test_legacy_is_upconverted(magic: int, codec: int) -> None:
    batch = validate(legacy_set(magic, codec), produce_version=2)
    assert batch.magic == 2 and batch.crc_ok() and batch.compression == codec
    assert [(r.offset_delta, r.key, r.value) for r in decode_records(batch)] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(3)]


def test_legacy_crc_mismatch_is_corrupt_message() -> None:
    buf = legacy_set()
    buf[-1] ^= 1
    rejects(buf, ErrorCode.CORRUPT_MESSAGE, produce_version=2)


def test_legacy_mixed_magic_is_invalid_record() -> None:
    rejects(legacy_set(1, n=1) + legacy_set(0, n=1), ErrorCode.INVALID_RECORD, produce_version=1)


def test_legacy_two_compressed_wrappers_is_invalid_record() -> None:
    rejects(legacy_set(1, c.GZIP) + legacy_set(1, c.GZIP), ErrorCode.INVALID_RECORD, produce_version=2)


def test_legacy_too_large_is_message_too_large() -> None:
    rejects(legacy_set(1, c.GZIP, n=50), ErrorCode.MESSAGE_TOO_LARGE, produce_version=2, max_message_bytes=40)


def test_legacy_log_append_time_is_invalid_timestamp() -> None:
    rejects(legacy_set(1, c.GZIP, timestamp_type=1), ErrorCode.INVALID_TIMESTAMP, produce_version=2)


def test_legacy_zstd_is_unsupported_compression_type() -> None:
    message = encode_message(1, c.ZSTD, NOW, None, c.compress(c.ZSTD, b""))
    rejects(struct.pack(">qi", 0, len(message)) + message, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            produce_version=2)


def test_legacy_inner_crc_is_corrupt_message() -> None:
    inner_message = bytearray(encode_message(1, 0, NOW, b"k", b"v"))
    inner_message[-1] ^= 1
    inner = struct.pack(">qi", 0, len(inner_message)) + bytes(inner_message)
    wrapper = encode_message(1, c.GZIP, NOW, None, c.compress(c.GZIP, inner))
    rejects(struct.pack(">qi", 0, len(wrapper)) + wrapper, ErrorCode.CORRUPT_MESSAGE, produce_version=2)


@pytest.mark.parametrize("inner_attributes_magic", [(0, 0), (c.GZIP, 1)])
def test_legacy_inner_magic_or_compression_is_invalid_record(inner_attributes_magic: tuple[int, int]) -> None:
    attributes, magic = inner_attributes_magic
    inner_message = encode_message(magic, attributes, NOW, b"k", b"v")
    inner = struct.pack(">qi", 0, len(inner_message)) + inner_message
    wrapper = encode_message(1, c.GZIP, NOW, None, c.compress(c.GZIP, inner))
    rejects(struct.pack(">qi", 0, len(wrapper)) + wrapper, ErrorCode.INVALID_RECORD, produce_version=2)


def test_legacy_null_key_on_compacted_and_timestamps() -> None:
    records = [LegacyRecord(0, NOW, None, b"v"), LegacyRecord(1, NOW - 50_000, b"k", b"v")]
    buf = encode_message_set(records, 1, c.GZIP)
    error = rejects(buf, ErrorCode.INVALID_RECORD, produce_version=2, compacted=True)
    assert [index for index, _ in error.record_errors] == [0]
    rejects(buf, ErrorCode.INVALID_TIMESTAMP, produce_version=2, timestamp_before_max_ms=1000)


# --- property: every flipped byte under the CRC is caught -------------------------------------------
@settings(max_examples=300, deadline=None)
@given(data=st.data(), codec=st.sampled_from([c.NONE, c.GZIP, c.LZ4, c.ZSTD]), deep=st.booleans())
def test_property_any_corrupted_byte_after_crc_is_corrupt_message(data: st.DataObject, codec: int,
                                                                   deep: bool) -> None:
    buf = good(4, codec, producer_id=1, producer_epoch=0, base_sequence=0)
    index = data.draw(st.integers(min_value=21, max_value=len(buf) - 1))
    buf[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    rejects(buf, ErrorCode.CORRUPT_MESSAGE, deep=deep)


def test_old_produce_versions_may_carry_magic_2() -> None:
    buf = good()
    assert validate(buf, produce_version=2).bytes_view().nbytes == len(buf)


def test_legacy_uncompressed_log_append_time_is_invalid_timestamp() -> None:
    rejects(legacy_set(1, c.NONE, timestamp_type=1), ErrorCode.INVALID_TIMESTAMP, produce_version=2)


def test_the_future_bound_alone_is_checked_on_the_header() -> None:
    """Kafka 4's default window (after 1 h, before unbounded) without reading records: a batch whose
    max timestamp is inside passes header-only; one outside is read for Kafka's per-record errors."""
    inside = build_batch([Record(0, 0, b"k", b"a"), Record(1, 5_000, b"k", b"b")], base_timestamp=NOW)
    validate(inside, timestamp_after_max_ms=5_000, deep=False)
    outside = build_batch([Record(0, 0, b"k", b"a"), Record(1, 5_001, b"k", b"b")], base_timestamp=NOW)
    error = rejects(outside, ErrorCode.INVALID_TIMESTAMP, timestamp_after_max_ms=5_000, deep=False)
    assert [index for index, _ in error.record_errors] == [1]
    validate(outside, timestamp_type="LogAppendTime", timestamp_after_max_ms=5_000, deep=False)
