"""Magic v0/v1 message sets: decode/encode, compressed wrappers, conversion; kafka-python as oracle."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as c
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.records.legacy import (
    LegacyRecord,
    decode_message_set,
    downconvert,
    encode_message,
    encode_message_set,
    upconvert_to_v2,
)
from grete.protocol.records.record import Record, absolute_records, build_batch

LEGACY_CODECS = [c.NONE, c.GZIP, c.SNAPPY, c.LZ4]


def _records(magic: int, n: int = 6, first: int = 0) -> list[LegacyRecord]:
    return [LegacyRecord(first + i, 1_500_000_000_000 + i if magic else -1,
                         None if i % 2 else b"k%d" % i, b"v" * i if i != 3 else None, magic)
            for i in range(n)]


def _needs_kafka_python_codec(codec: int, magic: int) -> None:
    """kafka-python needs python-snappy / lz4 (+ xxhash for lz4 v0) for those codecs: skip without."""
    from kafka import codec as kc

    available = {c.NONE: True, c.GZIP: True, c.SNAPPY: kc.has_snappy(),
                 c.LZ4: kc.has_lz4() and (magic == 1 or kc.xxhash is not None)}
    if not available[codec]:
        pytest.skip("kafka-python lacks this codec here")


def _kafka_python_read(buf: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    out = []
    records = MemoryRecords(buf)
    while (batch := records.next_batch()) is not None:
        out += [(m.offset, m.timestamp, m.key, m.value) for m in batch]
    return out


def test_message_layout_v1() -> None:
    message = encode_message(1, 0, 1234, b"k", b"val")
    body = struct.pack(">bbq", 1, 0, 1234) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 3) + b"val"
    assert message == struct.pack(">I", zlib.crc32(body)) + body
    assert len(encode_message(0, 0, -1, None, None)) == 14
    assert len(encode_message(1, 0, -1, None, None)) == 22


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_round_trip_and_kafka_python_reads_ours(magic: int, codec: int) -> None:
    _needs_kafka_python_codec(codec, magic)
    records = _records(magic, first=40)
    buf = encode_message_set(records, magic, codec)
    assert decode_message_set(buf) == records
    assert _kafka_python_read(bytes(buf)) == [
        (r.offset, r.timestamp if magic else None, r.key, r.value) for r in records]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_we_read_kafka_python_message_sets(magic: int, codec: int) -> None:
    _needs_kafka_python_codec(codec, magic)
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(5):
        builder.append(i, 1_400_000_000_000 + i * 3, b"key%d" % i, b"value%d" % i)
    buf = bytes(builder.build())
    got = decode_message_set(buf)
    # A producer's wrapper offset is a placeholder (kafka-python writes 0, Java n-1): only the
    # spacing of the offsets is meaningful before the broker assigns them.
    assert [(r.offset - got[0].offset, r.timestamp, r.key, r.value) for r in got] == [
        (i, 1_400_000_000_000 + i * 3 if magic else -1, b"key%d" % i, b"value%d" % i) for i in range(5)]
    upconverted = absolute_records(RecordBatch(upconvert_to_v2(buf), 0))
    assert [(r.offset, r.value) for r in upconverted] == [(i, b"value%d" % i) for i in range(5)]


def test_v1_relative_inner_offsets_resolve_from_the_wrapper_offset() -> None:
    inner = bytearray()
    for rel in range(3):
        message = encode_message(1, 0, 10 + rel, None, b"m%d" % rel)
        inner += struct.pack(">qi", rel, len(message)) + message
    wrapper = encode_message(1, c.GZIP, 12, None, c.compress(c.GZIP, inner))
    buf = struct.pack(">qi", 1002, len(wrapper)) + wrapper
    assert [(r.offset, r.value) for r in decode_message_set(buf)] == [(1000, b"m0"), (1001, b"m1"), (1002, b"m2")]


def test_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    buf = encode_message_set(_records(1, 3), 1, c.GZIP, timestamp_type=1)
    got = decode_message_set(buf)
    assert {r.timestamp for r in got} == {1_500_000_000_002} and {r.timestamp_type for r in got} == {1}


def test_corrupt_crc_is_corrupt_message() -> None:
    buf = bytearray(encode_message_set(_records(1, 2), 1))
    buf[-1] ^= 0xFF
    with pytest.raises(KafkaError) as info:
        decode_message_set(buf)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_inner_crc_is_corrupt_message() -> None:
    message = bytearray(encode_message(1, 0, 5, None, b"x"))
    message[-1] ^= 1
    inner = struct.pack(">qi", 0, len(message)) + bytes(message)
    wrapper = encode_message(1, c.GZIP, 5, None, c.compress(c.GZIP, inner))
    with pytest.raises(KafkaError) as info:
        decode_message_set(struct.pack(">qi", 0, len(wrapper)) + wrapper)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_inner_magic_mismatch_and_nested_compression_are_invalid_record() -> None:
    for inner_message in (encode_message(0, 0, -1, None, b"x"), encode_message(1, c.GZIP, 5, None, b"x")):
        inner = struct.pack(">qi", 0, len(inner_message)) + inner_message
        wrapper = encode_message(1, c.GZIP, 5, None, c.compress(c.GZIP, inner))
        with pytest.raises(KafkaError) as info:
            decode_message_set(struct.pack(">qi", 0, len(wrapper)) + wrapper)
        assert info.value.code == ErrorCode.INVALID_RECORD


def test_truncated_tail_is_skipped_unless_strict() -> None:
    buf = encode_message_set(_records(1, 3), 1)
    assert len(decode_message_set(buf[:-5], strict=False)) == 2
    with pytest.raises(KafkaError):
        decode_message_set(buf[:-5])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_upconvert(magic: int, codec: int) -> None:
    records = _records(magic)
    batch = RecordBatch(upconvert_to_v2(encode_message_set(records, magic, codec)), 0)
    assert batch.crc_ok() and batch.magic == 2 and batch.compression == codec
    assert batch.records_count == len(records) and batch.last_offset_delta == len(records) - 1
    got = absolute_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (i, r.timestamp, r.key, r.value) for i, r in enumerate(records)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_downconvert_is_readable_by_kafka_python(magic: int, codec: int) -> None:
    _needs_kafka_python_codec(codec, magic)
    first = build_batch([Record(i, i * 10, b"k%d" % i, b"v%d" % i, [("dropped", b"h")]) for i in range(4)],
                        compression=codec, base_offset=10, base_timestamp=2_000_000)
    marker = build_end_txn_marker(3, 0, True, 1, 2_000_100, base_offset=14)
    second = build_batch([Record(0, 0, None, b"last")], compression=codec, base_offset=15, base_timestamp=2_000_200)
    data = bytes(first + marker + second)
    converted = downconvert(data + second[:30], magic)  # a partial trailing batch is dropped
    expected = [(10 + i, 2_000_000 + i * 10, b"k%d" % i, b"v%d" % i) for i in range(4)] + [(15, 2_000_200, None, b"last")]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_message_set(converted)] == [
        (o, t if magic else -1, k, v) for o, t, k, v in expected]
    assert _kafka_python_read(converted) == [(o, t if magic else None, k, v) for o, t, k, v in expected]


def test_downconvert_zstd_is_unsupported() -> None:
    data = build_batch([Record(0, 0, None, b"x")], compression=c.ZSTD, base_timestamp=0)
    with pytest.raises(KafkaError) as info:
        downconvert(data, 1)
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_downconvert_v1_to_v0_and_passthrough() -> None:
    v1 = encode_message_set(_records(1, 3), 1)
    assert downconvert(v1, 1) == bytes(v1)
    assert [r.timestamp for r in decode_message_set(downconvert(v1, 0))] == [-1, -1, -1]


legacy_st = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                               st.one_of(st.none(), st.binary(max_size=200)),
                               st.integers(min_value=-1, max_value=2**50)), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(items=legacy_st, magic=st.sampled_from([0, 1]), codec=st.sampled_from(LEGACY_CODECS),
       first=st.integers(min_value=0, max_value=2**40))
def test_property_legacy_round_trip(items: list[tuple[bytes | None, bytes | None, int]], magic: int,
                                    codec: int, first: int) -> None:
    records = [LegacyRecord(first + i, ts if magic else -1, k, v, magic) for i, (k, v, ts) in enumerate(items)]
    assert decode_message_set(encode_message_set(records, magic, codec)) == records
