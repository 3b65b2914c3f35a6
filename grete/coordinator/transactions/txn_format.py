"""Kafka's record format for the ``__transaction_state`` topic: keys and values as raw bytes.

Key (TransactionLogKey v0): ``version:int16 = 0, transactional_id:string``.

Value (TransactionLogValue) starts with an int16 version. Version 0 is what Kafka writes for a
transaction of version 1 clients, and what grete writes for them:

    producer_id:int64  producer_epoch:int16  transaction_timeout_ms:int32  transaction_status:int8
    transaction_partitions: nullable array of [topic:string, partition_ids:array of int32]
    transaction_last_update_timestamp_ms:int64  transaction_start_timestamp_ms:int64

Version 1 is flexible (compact strings and arrays, tagged fields PreviousProducerId 0,
NextProducerId 1, ClientTransactionVersion 2, NextProducerEpoch 3, each written only when not its
default); grete writes it for a transaction of a transaction version 2 client (KIP-890 part 2), as
Kafka does, and reads Apache Kafka's. A ``None`` value is a tombstone (the
transactional id expired). ``kafka-dump-log --transaction-log-decoder`` reads what this writes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError

KEY_VERSION = 0
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
TV2 = 2  # the client transaction version that writes (and needs) the flexible value
NO_ID = -1

_HEAD = struct.Struct(">qhib")
_TIMES = struct.Struct(">qq")


class TxnState(IntEnum):
    """Transaction states with Kafka's ids (the byte in the log) and names (DescribeTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.kafka_name.lower() == name.lower()), None)


class FormatError(ValueError):
    """Bytes that are not a transaction-log record of a version we know."""


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int
    # Version 1's tagged fields (KIP-890 part 2): the producer id before and after an epoch
    # overflow, and the client's transaction version.
    previous_producer_id: int = NO_ID
    next_producer_id: int = NO_ID
    client_transaction_version: int = 0
    next_producer_epoch: int = NO_ID


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(raw)) + raw


def decode_key(data: bytes) -> str:
    try:
        reader = Reader(data)
        version = reader.int16()
        if version != KEY_VERSION:
            raise FormatError(f"unknown transaction log key version {version}")
        return reader.string(False)
    except ProtocolError as exc:
        raise FormatError(f"bad transaction log key: {exc}") from None


def encode_value(value: TxnLogValue) -> bytes:
    if value.client_transaction_version >= TV2:
        return _encode_flexible(value)
    out = bytearray(struct.pack(">h", VALUE_VERSION))
    out += _HEAD.pack(value.producer_id, value.producer_epoch, value.timeout_ms, int(value.state))
    by_topic = _by_topic(value)
    # The field is nullable, but Kafka's own reader (3.9) fails on null: always write a list.
    out += struct.pack(">i", len(by_topic))
    for topic, ids in by_topic.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


def _by_topic(value: TxnLogValue) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _encode_flexible(value: TxnLogValue) -> bytes:
    w = Writer()
    w.int16(FLEXIBLE_VALUE_VERSION)
    w.raw(_HEAD.pack(value.producer_id, value.producer_epoch, value.timeout_ms, int(value.state)))
    by_topic = _by_topic(value)
    w.uvarint(len(by_topic) + 1)
    for topic, ids in by_topic.items():
        w.string(topic, True)
        w.uvarint(len(ids) + 1)
        w.primitive_array("int32", ids)
        w.uvarint(0)  # the topic entry's tagged fields
    w.raw(_TIMES.pack(value.last_update_ms, value.start_ms))
    tagged = [(tag, data) for tag, data, default in (
        (0, struct.pack(">q", value.previous_producer_id), value.previous_producer_id == NO_ID),
        (1, struct.pack(">q", value.next_producer_id), value.next_producer_id == NO_ID),
        (2, struct.pack(">h", value.client_transaction_version), value.client_transaction_version == 0),
        (3, struct.pack(">h", value.next_producer_epoch), value.next_producer_epoch == NO_ID)) if not default]
    w.tagged_fields(tagged, None)
    return w.getvalue()


def decode_value(data: bytes) -> TxnLogValue:
    try:
        reader = Reader(data)
        version = reader.int16()
        if version not in (0, 1):
            raise FormatError(f"unknown transaction log value version {version}")
        flexible = version >= 1
        pid, epoch, timeout, status = reader.int64(), reader.int16(), reader.int32(), reader.int8()
        partitions: list[tuple[str, int]] = []
        for _ in range(max(reader.array_length(flexible), 0)):
            topic = reader.string(flexible)
            for _ in range(reader.array_length(flexible)):
                partitions.append((topic, reader.int32()))
            if flexible:
                reader.tagged_fields()
        last_update, start = reader.int64(), reader.int64()
        tags = {tag: bytes(data) for tag, data in reader.tagged_fields()} if flexible else {}
        return TxnLogValue(pid, epoch, timeout, TxnState(status), tuple(partitions), last_update, start,
                           _tag(tags, 0, ">q"), _tag(tags, 1, ">q"), _tag(tags, 2, ">h", 0), _tag(tags, 3, ">h"))
    except (ProtocolError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"bad transaction log value: {exc}") from None


def _tag(tags: dict[int, bytes], tag: int, fmt: str, default: int = NO_ID) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != struct.calcsize(fmt):
        raise FormatError(f"tagged field {tag} of {len(data)} bytes")
    return int(struct.unpack(fmt, data)[0])
