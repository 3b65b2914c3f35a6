"""Control records and transaction markers, checked against kafka-python's ControlRecord reader."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import (
    ControlType,
    build_end_txn_marker,
    encode_control_key,
    parse_control_record,
)
from grete.protocol.records.record import Record, build_batch, decode_records


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_layout(commit: bool) -> None:
    buf = build_end_txn_marker(4242, 7, commit, coordinator_epoch=13, timestamp_ms=1_700_000_000_123,
                               base_offset=88)
    batch = RecordBatch(buf, 0)
    assert batch.crc_ok()
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, -1)
    assert (batch.base_offset, batch.records_count, batch.last_offset_delta) == (88, 1, 0)
    assert batch.base_timestamp == batch.max_timestamp == 1_700_000_000_123
    (record,) = decode_records(batch)
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 13)
    assert parse_control_record(batch) == (ControlType.COMMIT if commit else ControlType.ABORT, 13)


@pytest.mark.parametrize("commit", [True, False])
def test_kafka_python_sees_the_marker(commit: bool) -> None:
    theirs = DefaultRecordBatch(bytes(build_end_txn_marker(1, 0, commit, 5, 1000)))
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    (record,) = list(theirs)
    assert record.type == (1 if commit else 0)
    assert record.abort == (not commit)


def test_other_control_types_have_no_epoch() -> None:
    buf = build_batch([Record(0, 0, encode_control_key(ControlType.LEADER_CHANGE), b"\x00\x00")],
                      control=True, base_timestamp=0)
    assert parse_control_record(RecordBatch(buf, 0)) == (ControlType.LEADER_CHANGE, None)
    unknown = build_batch([Record(0, 0, encode_control_key(42), None)], control=True, base_timestamp=0)
    assert parse_control_record(RecordBatch(unknown, 0)) == (42, None)


@pytest.mark.parametrize(("key", "value"), [(b"\x00", b"\x00" * 6), (None, None), (b"\x00\x00\x00\x01", b"\x00")])
def test_malformed_control_record_is_invalid_record(key: bytes | None, value: bytes | None) -> None:
    buf = build_batch([Record(0, 0, key, value)], control=True, base_timestamp=0)
    with pytest.raises(KafkaError) as info:
        parse_control_record(RecordBatch(buf, 0))
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_non_control_batch_is_rejected() -> None:
    with pytest.raises(KafkaError):
        parse_control_record(RecordBatch(build_batch([Record(0, 0, None, b"x")], base_timestamp=0), 0))
