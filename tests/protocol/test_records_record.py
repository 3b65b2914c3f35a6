"""v2 records: varints, decode/encode, build_batch, malformed records, kafka-python as an oracle."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as c
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import (
    Record,
    absolute_records,
    build_batch,
    decode_records,
    encode_records,
    parse_records,
    simple_records,
)
from grete.protocol.records.varint import (
    encode_varint,
    read_varint,
    read_varlong,
    size_of_varint,
    write_varint,
)

CODECS = [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
KP_CODECS = {c.NONE: 0, c.GZIP: 1, c.SNAPPY: 2, c.LZ4: 3, c.ZSTD: 4}


# --- varints ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    # Values from the protobuf zig-zag definition: (n << 1) ^ (n >> 31), base-128 little-endian.
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    out = bytearray(b"\xaa")
    write_varint(out, value)
    assert read_varlong(out, 1) == (value, len(out))
    assert size_of_varint(value) == len(out) - 1


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip_matches_kafka_python(value: int) -> None:
    from kafka.record.util import encode_varint as kp_encode

    out = bytearray()
    kp_encode(value, out.append)
    assert encode_varint(value) == bytes(out)


def test_varint_errors_are_invalid_record() -> None:
    for bad in (b"", b"\x80", b"\xff\xff\xff\xff\xff\x01"):
        with pytest.raises(KafkaError) as info:
            read_varint(bad, 0)
        assert info.value.code == ErrorCode.INVALID_RECORD


# --- decode / build ----------------------------------------------------------------------------
def sample_records() -> list[Record]:
    return [
        Record(0, 0, b"key-0", b"value-0"),
        Record(1, 5, None, b"value-1", [("h1", b"x"), ("h2", None)]),
        Record(2, -3, b"", None),
        Record(3, 1000, b"k" * 300, b"v" * 5000, [("\u00e9t\u00e9", b"")]),
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_build_then_decode(codec: int) -> None:
    records = sample_records()
    buf = build_batch(records, compression=codec, base_offset=100, base_timestamp=1_700_000_000_000,
                      producer_id=7, producer_epoch=2, base_sequence=40, partition_leader_epoch=3)
    batch = RecordBatch(buf, 0)
    assert batch.size == len(buf)
    assert batch.crc_ok()
    assert (batch.magic, batch.compression, batch.records_count, batch.last_offset_delta) == (2, codec, 4, 3)
    assert batch.max_timestamp == 1_700_000_001_000
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (7, 2, 40, 43)
    assert decode_records(batch) == records
    absolute = absolute_records(batch)
    assert [(r.offset, r.timestamp) for r in absolute] == [
        (100, 1_700_000_000_000), (101, 1_700_000_000_005), (102, 1_699_999_999_997), (103, 1_700_000_001_000)]


def test_crc_is_crc32c_from_attributes_to_end() -> None:
    buf = build_batch(simple_records([b"a", b"b"]), base_timestamp=1)
    (stored,) = struct.unpack_from(">I", buf, 17)
    assert stored == crc32c.crc32c(bytes(buf[21:]))


def test_log_append_time_records_use_max_timestamp() -> None:
    buf = build_batch(simple_records([b"a", b"b"], timestamp_step=10), base_timestamp=1000)
    batch = RecordBatch(buf, 0)
    batch.set_log_append_time(5555)
    assert batch.crc_ok()
    assert [r.timestamp for r in absolute_records(RecordBatch(buf, 0))] == [5555, 5555]


def test_empty_batch_defaults() -> None:
    buf = build_batch([])
    batch = RecordBatch(buf, 0)
    assert batch.records_count == 0 and batch.base_timestamp == -1 and batch.max_timestamp == -1
    assert decode_records(batch) == []


def test_flags() -> None:
    batch = RecordBatch(build_batch(simple_records([b"x"]), transactional=True, control=True,
                                    timestamp_type=1, base_timestamp=0), 0)
    assert batch.is_transactional and batch.is_control and batch.timestamp_type == 1


# --- malformed records ----------------------------------------------------------------------------
def _stream(record_body: bytes) -> bytes:
    return encode_varint(len(record_body)) + record_body


def _body(*, headers: bytes = b"\x00", key: bytes = b"\x01", value: bytes = b"\x01") -> bytes:
    return b"\x00" + encode_varint(0) + encode_varint(0) + key + value + headers


@pytest.mark.parametrize(("stream", "count"), [
    (_stream(_body(headers=encode_varint(-1))), 1),                               # negative header count
    (_stream(_body(headers=encode_varint(100))), 1),                              # header count > bytes left
    (_stream(_body(headers=encode_varint(1) + encode_varint(-1) + b"\x01")), 1),  # negative header key
    (_stream(_body()) + b"\x00", 1),                                              # bytes after the records
    (_stream(_body()), 2),                                                        # fewer records than declared
    (encode_varint(len(_body()) + 1) + _body() + b"\x00", 1),                      # length > body read
    (encode_varint(len(_body()) - 1) + _body(), 1),                               # length < body
    (encode_varint(50) + _body(), 1),                                             # length past the end
    (_stream(_body(key=encode_varint(10) + b"abc")), 1),                          # key past the record end
    (encode_varint(0), 1),                                                        # empty record
])
def test_malformed_records_are_invalid_record(stream: bytes, count: int) -> None:
    with pytest.raises(KafkaError) as info:
        parse_records(stream, count)
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_record_layout_matches_spec_bytes() -> None:
    # Hand-assembled from the spec (the length is a zig-zag varint too): length, attributes, tsDelta, offsetDelta, key, value, headers.
    expected_body = (b"\x00" + b"\x14" + b"\x02" + b"\x02" + b"k" + b"\x04" + b"vv"
                     + b"\x02" + b"\x02" + b"h" + b"\x01")
    assert encode_records([Record(1, 10, b"k", b"vv", [("h", None)])]) == bytes([2 * len(expected_body)]) + expected_body


# --- interop with kafka-python -------------------------------------------------------------------
def _kp_has(codec: int) -> bool:
    from kafka import codec as kc

    return {c.NONE: True, c.GZIP: kc.has_gzip(), c.SNAPPY: kc.has_snappy(), c.LZ4: kc.has_lz4(),
            c.ZSTD: kc.has_zstd()}[codec]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_batches(codec: int) -> None:
    if not _kp_has(codec):
        pytest.skip("kafka-python lacks this codec")
    builder = DefaultRecordBatchBuilder(2, KP_CODECS[codec], False, 99, 3, 17, 1 << 20)
    expected = []
    for i in range(50):
        key = None if i % 3 == 0 else b"key-%d" % i
        headers = [("n", str(i).encode()), ("null", None)] if i % 2 else []
        builder.append(i, 1_600_000_000_000 + i * 7, key, b"value-%d" % i * (i % 5 + 1), headers)
        expected.append((i, 1_600_000_000_000 + i * 7, key, b"value-%d" % i * (i % 5 + 1), headers))
    buf = bytes(builder.build())
    batch = RecordBatch(buf, 0)
    assert batch.crc_ok() and batch.compression == codec and batch.records_count == 50
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 3, 17)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in absolute_records(batch)]
    assert got == expected


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: int) -> None:
    if not _kp_has(codec):
        pytest.skip("kafka-python lacks this codec")
    records = sample_records() * 20
    records = [Record(i, r.timestamp_delta, r.key, r.value, r.headers) for i, r in enumerate(records)]
    buf = build_batch(records, compression=codec, base_offset=500, base_timestamp=1_000_000,
                      producer_id=5, producer_epoch=1, base_sequence=9, transactional=True)
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.records_count, theirs.is_transactional) == (500, 80, True)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (5, 1, 9)
    got = [(m.offset, m.timestamp, m.key, m.value, [tuple(h) for h in m.headers]) for m in theirs]
    assert got == [(500 + i, 1_000_000 + r.timestamp_delta, r.key, r.value, r.headers)
                   for i, r in enumerate(records)]


# --- properties --------------------------------------------------------------------------------
header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.builds(
    Record,
    offset_delta=st.just(0),
    timestamp_delta=st.integers(min_value=-(2**40), max_value=2**40),
    key=st.one_of(st.none(), st.binary(max_size=64)),
    value=st.one_of(st.none(), st.binary(max_size=512)),
    headers=st.lists(header_st, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_st, max_size=20), codec=st.sampled_from(CODECS),
       base_timestamp=st.integers(min_value=0, max_value=2**45))
def test_property_build_decode_round_trip(records: list[Record], codec: int, base_timestamp: int) -> None:
    for i, record in enumerate(records):
        record.offset_delta = i
    buf = build_batch(records, compression=codec, base_timestamp=base_timestamp)
    batch = RecordBatch(buf, 0)
    assert batch.crc_ok() and batch.size == len(buf)
    assert decode_records(batch) == records


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), count=st.integers(min_value=0, max_value=5))
def test_property_garbage_only_raises_invalid_record(data: bytes, count: int) -> None:
    try:
        parse_records(data, count)
    except KafkaError as exc:
        assert exc.code == ErrorCode.INVALID_RECORD
