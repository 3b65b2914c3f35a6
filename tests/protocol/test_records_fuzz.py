"""Garbage in, RecordValidationError out: validation never leaks IndexError/struct.error/etc.

Also a Hypothesis interop check with kafka-python in both directions on random records.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from grete.protocol.errors import KafkaError
from grete.protocol.records import compression as c
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.legacy import LegacyRecord, decode_message_set, downconvert, encode_message_set
from grete.protocol.records.record import Record, absolute_records, build_batch
from grete.protocol.records.validate import LONG_MAX, RecordValidationError, validate_produce_records


def _validate(buf: bytes, version: int, deep: bool) -> None:
    validate_produce_records(memoryview(bytearray(buf)), produce_version=version, compacted=True,
                             max_message_bytes=1 << 20, timestamp_type="CreateTime",
                             timestamp_before_max_ms=LONG_MAX, timestamp_after_max_ms=1000, now_ms=0, deep=deep,
                             max_uncompressed_bytes=1 << 20)


def _seed(kind: int, codec: int) -> bytes:
    if kind == 0:
        records = [Record(i, i, b"k", b"v" * i, [("h", b"x")]) for i in range(4)]
        return bytes(build_batch(records, compression=codec, base_timestamp=0))
    magic = kind - 1
    legacy = [LegacyRecord(i, i if magic else -1, b"k", b"v" * i, magic) for i in range(4)]
    return bytes(encode_message_set(legacy, magic, min(codec, c.LZ4)))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), kind=st.integers(0, 2), codec=st.sampled_from([0, 1, 2, 3, 4]),
       version=st.sampled_from([0, 2, 3, 7, 9]), deep=st.booleans())
def test_property_mutated_payloads_only_raise_validation_errors(data: st.DataObject, kind: int, codec: int,
                                                                version: int, deep: bool) -> None:
    buf = bytearray(_seed(kind, codec))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(buf) - 1))
        buf[index] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    if kind == 0 and len(buf) >= 61 and data.draw(st.booleans()):
        RecordBatch(buf, 0).rewrite_crc()  # reach the checks that come after the CRC
    try:
        _validate(bytes(buf), version, deep)
    except RecordValidationError:
        pass


@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=120), version=st.sampled_from([0, 2, 9]), deep=st.booleans())
def test_property_random_bytes_only_raise_validation_errors(buf: bytes, version: int, deep: bool) -> None:
    try:
        _validate(buf, version, deep)
    except RecordValidationError:
        pass


@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=200), magic=st.sampled_from([0, 1]))
def test_property_legacy_garbage_only_raises_kafka_errors(buf: bytes, magic: int) -> None:
    for call in (lambda: decode_message_set(buf), lambda: decode_message_set(buf, strict=False),
                 lambda: downconvert(buf, magic)):
        try:
            call()
        except KafkaError:
            pass


def _kafka_python_codecs() -> list[int]:
    from kafka import codec as kc

    return [codec for codec, ok in ((0, True), (1, True), (2, kc.has_snappy()), (3, kc.has_lz4()),
                                    (4, kc.has_zstd())) if ok]


headers_st = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)
kp_record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300)),
                         st.integers(0, 10_000), headers_st)


@settings(max_examples=100, deadline=None)
@given(items=st.lists(kp_record_st, min_size=1, max_size=15), codec=st.sampled_from(_kafka_python_codecs()),
       base=st.integers(0, 2**41))
def test_property_interop_with_kafka_python(items: list[tuple[bytes | None, bytes | None, int,
                                                              list[tuple[str, bytes | None]]]],
                                            codec: int, base: int) -> None:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 22)
    for i, (key, value, delta, headers) in enumerate(items):
        builder.append(i, base + delta, key, value, headers)
    theirs = bytes(builder.build())
    expected = [(i, base + d, k, v, h) for i, (k, v, d, h) in enumerate(items)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in absolute_records(RecordBatch(theirs, 0))] \
        == expected

    ours = build_batch([Record(i, d, k, v, h) for i, (k, v, d, h) in enumerate(items)], compression=codec,
                       base_timestamp=base)
    read_back = DefaultRecordBatch(bytes(ours))
    assert read_back.validate_crc()
    assert [(m.offset, m.timestamp, m.key, m.value, [tuple(x) for x in m.headers]) for m in read_back] == expected
    assert struct.unpack_from(">q", ours, 35)[0] == max(base + d for _, _, d, _ in items)
