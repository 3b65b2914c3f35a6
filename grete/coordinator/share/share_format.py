"""Records of ``__share_group_state`` in Kafka's formats (share-coordinator ShareSnapshot/ShareUpdate).

Key: int16 record type (0 ShareSnapshot, 1 ShareUpdate), then GroupId (int16-length string),
TopicId (uuid), Partition (int32), not flexible. Value: int16 version 0, then a flexible struct:
ShareSnapshotValue (SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset, CreateTimestamp,
WriteTimestamp, StateBatches) or ShareUpdateValue (SnapshotEpoch, LeaderEpoch, StartOffset,
StateBatches); DeliveryCompleteCount is tagged field 0, written only when not -1.
grete writes snapshots only; it reads both (an update's batches replace the snapshot's where they
overlap, as Kafka's share coordinator combines them).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from grete.protocol.codec import Reader, Writer
from grete.storage.files import uuid_from_kafka, uuid_to_kafka

SNAPSHOT, UPDATE = 0, 1
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(slots=True)
class ShareState:
    kind: int
    snapshot_epoch: int
    start_offset: int
    state_epoch: int = 0
    leader_epoch: int = -1
    create_timestamp: int = -1
    write_timestamp: int = -1
    batches: list[StateBatch] = field(default_factory=list)


def encode_key(kind: int, key: ShareKey) -> bytes:
    w = Writer()
    w.int16(kind)
    w.string(key.group_id, False)
    w.uuid(key.topic_id)
    w.int32(key.partition)
    return w.getvalue()


def decode_key(data: bytes | bytearray | memoryview) -> tuple[int, ShareKey] | None:
    r = Reader(data)
    kind = r.int16()
    if kind not in (SNAPSHOT, UPDATE):
        return None
    return kind, ShareKey(r.string(False), r.uuid(), r.int32())


def encode_value(state: ShareState) -> bytes:
    w = Writer()
    w.int16(VALUE_VERSION)
    w.int32(state.snapshot_epoch)
    if state.kind == SNAPSHOT:
        w.int32(state.state_epoch)
    w.int32(state.leader_epoch)
    w.int64(state.start_offset)
    if state.kind == SNAPSHOT:
        w.int64(state.create_timestamp)
        w.int64(state.write_timestamp)
    w.length(len(state.batches), True)
    for b in state.batches:
        w.int64(b.first_offset)
        w.int64(b.last_offset)
        w.int8(b.delivery_state)
        w.int16(b.delivery_count)
        w.uvarint(0)  # no tagged fields
    w.uvarint(0)
    return w.getvalue()


def decode_value(kind: int, data: bytes | bytearray | memoryview) -> ShareState:
    r = Reader(data)
    r.int16()  # version 0 is the only one
    snapshot_epoch = r.int32()
    state_epoch = r.int32() if kind == SNAPSHOT else 0
    leader_epoch = r.int32()
    start = r.int64()
    created = r.int64() if kind == SNAPSHOT else -1
    written = r.int64() if kind == SNAPSHOT else -1
    batches = []
    for _ in range(r.array_length(True)):
        batches.append(StateBatch(r.int64(), r.int64(), r.int8(), r.int16()))
        r.tagged_fields()
    r.tagged_fields()
    return ShareState(kind, snapshot_epoch, start, state_epoch, leader_epoch, created, written, batches)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: ShareKey, partitions: int) -> int:
    """Kafka's share coordinator: Utils.abs(("group:topicId:partition").hashCode()) % partitions."""
    h = java_string_hash(f"{key.group_id}:{uuid_to_kafka(key.topic_id)}:{key.partition}")
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def parse_coordinator_key(text: str) -> ShareKey | None:
    """FindCoordinator's SHARE key "groupId:topicId:partition" (topic id in Kafka's base64 form), or
    None when it is not one (Kafka answers INVALID_REQUEST for it). As Kafka 4.3.1 reads it: Java's
    split (trailing empty parts dropped), the group trimmed, any int32 partition with an optional sign."""
    parts = text.split(":")
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) != 3 or not _java_trim(parts[0]) or not _INT32.fullmatch(parts[2]):
        return None
    try:
        topic_id = uuid_from_kafka(parts[1])
    except ValueError:  # binascii.Error is a ValueError; so is a uuid of the wrong length
        return None
    partition = int(parts[2])
    return ShareKey(_java_trim(parts[0]), topic_id, partition) if -(1 << 31) <= partition < (1 << 31) else None


_INT32 = re.compile(r"[+-]?[0-9]+")


def _java_trim(text: str) -> str:
    """Java's String.trim: strips characters up to U+0020 at both ends."""
    return text.strip("".join(chr(c) for c in range(0x21)))
