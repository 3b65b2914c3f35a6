"""How KRaft frames its records' values, byte for byte as Kafka 4.3.1 does.

A ``__cluster_metadata`` record value (in the log and in snapshots) is Kafka's ApiMessageAndVersion as
its MetadataRecordSerde writes it: unsigned varint frame version (1), unsigned varint record type
(the spec's apiKey), unsigned varint record version, then the record body; nothing may follow it.

A KRaft control record's value (LEADER_CHANGE, SNAPSHOT_HEADER, ...) is the body alone, written and
read at version 0 (ControlRecordUtils' ``*_CURRENT_VERSION``). Its int16 version prefix is the schema's
own first field, ``Version``, so it is part of the message, not of the framing.
"""

from __future__ import annotations

from typing import Final

from grete.protocol.codec import Message, Reader, Writer
from grete.protocol.errors import ErrorCode, KafkaError, ProtocolError
from grete.protocol.metadata import (
    METADATA_RECORDS,
    KRaftVersionRecord,
    LeaderChangeMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
)
from grete.protocol.records.control import ControlType

__all__ = [
    "CONTROL_VALUES", "CONTROL_VALUE_VERSION", "FRAME_VERSION", "decode_control_value", "decode_metadata_record",
    "encode_control_value", "encode_metadata_record",
]

FRAME_VERSION: Final = 1
# Kafka reads the frame's type and version as unsigned varints that must fit an int16.
_MAX_INT16: Final = 0x7FFF

CONTROL_VALUES: Final[dict[int, type[Message]]] = {
    ControlType.LEADER_CHANGE: LeaderChangeMessage,
    ControlType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlType.KRAFT_VERSION: KRaftVersionRecord,
    ControlType.KRAFT_VOTERS: VotersRecord,
}
CONTROL_VALUE_VERSION: Final = 0


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


def encode_metadata_record(message: Message, version: int | None = None) -> bytes:
    """The record value of ``message`` at ``version`` (default: the highest its codec knows)."""
    cls = type(message)
    if METADATA_RECORDS.get(cls.API_KEY) is not cls:
        raise TypeError(f"{cls.__name__} is not a KRaft metadata record")
    v = cls.MAX_VERSION if version is None else version
    w = Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(cls.API_KEY)
    w.uvarint(v)
    message.encode(w, v)
    return w.getvalue()


def decode_metadata_record(data: bytes | memoryview) -> tuple[Message, int]:
    """(record, version) of a ``__cluster_metadata`` record value; CORRUPT_MESSAGE if it is not one."""
    r = Reader(data)
    try:
        frame = r.uvarint()
        if frame != FRAME_VERSION:
            raise _corrupt(f"metadata record frame version {frame} is not supported (only {FRAME_VERSION})")
        api_key = r.uvarint()
        version = r.uvarint()
        cls = METADATA_RECORDS.get(api_key) if api_key <= _MAX_INT16 else None
        if cls is None:
            raise _corrupt(f"unknown metadata record type {api_key}")
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise _corrupt(f"{cls.__name__} v{version} is not supported "
                           f"(versions {cls.MIN_VERSION}-{cls.MAX_VERSION})")
        message = cls.decode(r, version)
    except ProtocolError as exc:
        raise _corrupt(f"malformed metadata record: {exc}") from None
    if r.remaining():
        raise _corrupt(f"{r.remaining()} byte(s) of garbage after {cls.__name__} v{version}")
    return message, version


def encode_control_value(message: Message, version: int = CONTROL_VALUE_VERSION) -> bytes:
    """The value of a KRaft control record holding ``message`` (its key gives the control type)."""
    if type(message) not in CONTROL_VALUES.values():
        raise TypeError(f"{type(message).__name__} is not a KRaft control record value")
    return message.to_bytes(version)


def decode_control_value(control_type: int, data: bytes | memoryview) -> Message:
    """The message in a KRaft control record's value, read at version 0 as Kafka reads it.

    Unlike Kafka, bytes after the message are refused: Kafka never writes them.
    """
    cls = CONTROL_VALUES.get(control_type)
    if cls is None:
        raise _corrupt(f"control record type {control_type} carries no KRaft control value")
    r = Reader(data)
    try:
        message = cls.decode(r, CONTROL_VALUE_VERSION)
    except ProtocolError as exc:
        raise _corrupt(f"malformed {cls.__name__}: {exc}") from None
    if r.remaining():
        raise _corrupt(f"{r.remaining()} byte(s) of garbage after {cls.__name__}")
    return message
