"""Control records: transaction markers (COMMIT / ABORT) and the KRaft-only types.

A control batch has the control attribute bit set and holds one record whose key is
``version:int16 type:int16``. End-transaction markers (ABORT 0, COMMIT 1) carry the value
``version:int16 coordinator_epoch:int32`` and are also transactional, with the producer's id/epoch.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import NO_SEQUENCE, RecordBatch
from grete.protocol.records.record import Record, build_batch, decode_records

CONTROL_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0

_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def encode_control_key(control_type: int, version: int = CONTROL_KEY_VERSION) -> bytes:
    return _KEY.pack(version, control_type)


def encode_end_txn_value(coordinator_epoch: int, version: int = END_TXN_MARKER_VERSION) -> bytes:
    return _END_TXN_VALUE.pack(version, coordinator_epoch)


def parse_control_key(key: bytes | None) -> int:
    """The control type of a control record key (a ControlType when known, else the raw int).

    Later key versions are read with the version 0 layout, as Kafka does.
    """
    if key is None or len(key) < _KEY.size:
        raise KafkaError(ErrorCode.INVALID_RECORD, "invalid control record key: fewer than 4 bytes")
    _, control_type = _KEY.unpack_from(key)
    try:
        return ControlType(control_type)
    except ValueError:
        return int(control_type)


def parse_end_txn_value(value: bytes | None) -> int:
    """The coordinator epoch of a COMMIT/ABORT marker value."""
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise KafkaError(ErrorCode.INVALID_RECORD, "invalid end transaction marker value: fewer than 6 bytes")
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    return int(coordinator_epoch)


def build_end_txn_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                         timestamp_ms: int, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytearray:
    """A transactional control batch with one COMMIT or ABORT record, as a coordinator writes it."""
    control_type = ControlType.COMMIT if commit else ControlType.ABORT
    record = Record(0, 0, encode_control_key(control_type), encode_end_txn_value(coordinator_epoch))
    return build_batch([record], base_offset=base_offset, base_timestamp=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                       transactional=True, control=True, partition_leader_epoch=partition_leader_epoch)


def parse_control_record(batch: RecordBatch) -> tuple[int, int | None]:
    """(control type, coordinator epoch) of a control batch; the epoch is None for non-marker types."""
    if not batch.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "not a control batch")
    records = decode_records(batch)
    if not records:
        raise KafkaError(ErrorCode.INVALID_RECORD, "control batch without a record")
    control_type = parse_control_key(records[0].key)
    if control_type in (ControlType.ABORT, ControlType.COMMIT):
        return control_type, parse_end_txn_value(records[0].value)
    return control_type, None
