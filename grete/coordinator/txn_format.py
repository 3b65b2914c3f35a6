"""Kafka's record format for the ``__transaction_state`` topic: keys and values as raw bytes.

Key (TransactionLogKey v0): ``version:int16 = 0, transactional_id:string``.

Value (TransactionLogValue) starts with an int16 version. Version 0 is what Kafka writes while
transaction version 2 (KIP-890 part 2) is off, and the only version grete writes:

    producer_id:int64  producer_epoch:int16  transaction_timeout_ms:int32  transaction_status:int8
    transaction_partitions: nullable array of [topic:string, partition_ids:array of int32]
    transaction_last_update_timestamp_ms:int64  transaction_start_timestamp_ms:int64

Version 1 is flexible (compact strings and arrays, tagged fields PreviousProducerId 0,
NextProducerId 1, ClientTransactionVersion 2, NextProducerEpoch 3); it is read so that a log written
by Apache Kafka with transaction version 2 loads. A ``None`` value is a tombstone (the
transactional id expired). ``kafka-dump-log --transaction-log-decoder`` reads what this writes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from grete.protocol.codec import Reader
from grete.protocol.errors import ProtocolError

KEY_VERSION = 0
VALUE_VERSION = 0

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
    out = bytearray(struct.pack(">h", VALUE_VERSION))
    out += _HEAD.pack(value.producer_id, value.producer_epoch, value.timeout_ms, int(value.state))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    # The field is nullable, but Kafka's own reader (3.9) fails on null: always write a list.
    out += struct.pack(">i", len(by_topic))
    for topic, ids in by_topic.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


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
        if flexible:
            reader.tagged_fields()
        return TxnLogValue(pid, epoch, timeout, TxnState(status), tuple(partitions), last_update, start)
    except (ProtocolError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"bad transaction log value: {exc}") from None
