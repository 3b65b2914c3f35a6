"""The ``__consumer_offsets`` records of KIP-932 share groups, in Kafka 4.3.1's formats (its
kafka-group-coordinator schemas), so a share group outlives its coordinator's restart or move:

* 10 ShareGroupMemberMetadata (GroupId, MemberId) -> RackId?, ClientId, ClientHost, SubscribedTopicNames[]
* 11 ShareGroupMetadata (GroupId) -> Epoch int32, MetadataHash int64
* 12 ShareGroupTargetAssignmentMetadata (GroupId) -> AssignmentEpoch int32
* 13 ShareGroupTargetAssignmentMember (GroupId, MemberId) -> TopicPartitions[{TopicId, Partitions[]}]
* 14 ShareGroupCurrentMemberAssignment (GroupId, MemberId) -> MemberEpoch, PreviousMemberEpoch,
  State int8, AssignedPartitions[{TopicId, Partitions[]}]

Keys are an int16 record type then classic strings; values an int16 version (0) then the flexible
encoding. Type 9 (ShareGroupPartitionMetadata) is deprecated and skipped on load.

* 15 ShareGroupStatePartitionMetadata (GroupId) -> InitializingTopics[], InitializedTopics[{TopicId,
  TopicName, Partitions[], CreateTimestamp}], DeletingTopics[{TopicId, TopicName}]

grete's share-partition leaders initialize their state at first fetch, so the coordinator writes the
partitions it has assigned as InitializedTopics (initializing and deleting ones, which Kafka's
coordinator writes, are read as initialized and not written): what the group has, members or not,
wherever its coordinator moves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from grete.coordinator.groups.coordinator_records import Record, key, latest_by_key, typed_key, value_writer
from grete.coordinator.share.share_group import Assignment, InitializedTopic, ShareGroup, ShareMember
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError

log = logging.getLogger("grete.coordinator")

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
SHARE_RECORD_TYPES = frozenset(range(PARTITION_METADATA, STATE_PARTITION_METADATA + 1))
MEMBER_RECORD_TYPES = (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA)
STABLE = 0  # Kafka's MemberState.STABLE: share members have nothing to revoke


def decode_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group id, member id) of a share-group key; None for other records."""
    return typed_key(data, SHARE_RECORD_TYPES)


# ---------------------------------------------------------------------------------- values

def _partitions(w: Writer, assignment: Assignment) -> None:
    w.length(len(assignment), True)
    for topic_id, partitions in sorted(assignment.items()):
        w.uuid(topic_id)
        w.length(len(partitions), True)
        for p in sorted(partitions):
            w.int32(p)
        w.uvarint(0)


def _read_partitions(r: Reader) -> Assignment:
    assignment: Assignment = {}
    for _ in range(r.array_length(True)):
        topic_id = r.uuid()
        assignment[topic_id] = sorted(r.int32() for _ in range(r.array_length(True)))
        r.tagged_fields()
    return assignment


def member_metadata_value(m: ShareMember) -> bytes:
    w = value_writer()
    w.string(m.rack_id, True)
    w.string(m.client_id, True)
    w.string(m.client_host, True)
    names = sorted(m.subscribed)  # as Kafka's newShareGroupMemberSubscriptionRecord
    w.length(len(names), True)
    for name in names:
        w.string(name, True)
    w.uvarint(0)
    return w.getvalue()


def group_metadata_value(group: ShareGroup) -> bytes:
    w = value_writer()
    w.int32(group.epoch)
    w.int64(group.metadata_hash)
    w.uvarint(0)
    return w.getvalue()


def target_metadata_value(group: ShareGroup) -> bytes:
    w = value_writer()
    w.int32(group.assignment_epoch)
    w.uvarint(0)
    return w.getvalue()


def target_member_value(m: ShareMember) -> bytes:
    w = value_writer()
    _partitions(w, m.assignment)
    w.uvarint(0)
    return w.getvalue()


def state_partitions_value(group: ShareGroup) -> bytes:
    w = value_writer()
    w.length(0, True)  # InitializingTopics
    w.length(len(group.initialized), True)
    for topic_id, topic in sorted(group.initialized.items()):
        w.uuid(topic_id)
        w.string(topic.name, True)
        w.length(len(topic.partitions), True)
        for p in sorted(topic.partitions):
            w.int32(p)
        w.int64(topic.create_ms)
        w.uvarint(0)
    w.length(0, True)  # DeletingTopics
    w.uvarint(0)
    return w.getvalue()


def _read_state_partitions(group: ShareGroup, r: Reader) -> None:
    for _ in range(2):  # InitializingTopics, then InitializedTopics
        for _ in range(r.array_length(True)):
            topic_id, name = r.uuid(), r.string(True)
            partitions = {r.int32() for _ in range(r.array_length(True))}
            created = r.int64()
            r.tagged_fields()
            known = group.initialized.setdefault(topic_id, InitializedTopic(name, set(), created))
            known.partitions |= partitions  # a topic partly initializing, partly initialized: one


def current_assignment_value(m: ShareMember) -> bytes:
    w = value_writer()
    w.int32(m.epoch)
    w.int32(m.previous_epoch)
    w.int8(STABLE)
    _partitions(w, m.assignment)
    w.uvarint(0)
    return w.getvalue()


# --------------------------------------------------------------------------- group records

def group_records(group: ShareGroup, member_ids: Iterable[str]) -> dict[bytes, bytes]:
    """The records that say what the group and the named members are now (members that are gone
    have none). A share member's assignment is its target as soon as it is computed, so the target
    and current records carry the same partitions."""
    gid = group.group_id
    records = {key(GROUP_METADATA, gid): group_metadata_value(group),
               key(TARGET_ASSIGNMENT_METADATA, gid): target_metadata_value(group)}
    if group.initialized or key(STATE_PARTITION_METADATA, gid) in group.persisted:
        records[key(STATE_PARTITION_METADATA, gid)] = state_partitions_value(group)
    for member_id in member_ids:
        m = group.members.get(member_id)
        if m is None:
            continue
        records[key(MEMBER_METADATA, gid, member_id)] = member_metadata_value(m)
        records[key(TARGET_ASSIGNMENT_MEMBER, gid, member_id)] = target_member_value(m)
        records[key(CURRENT_MEMBER_ASSIGNMENT, gid, member_id)] = current_assignment_value(m)
    return records


def changes(group: ShareGroup) -> list[Record]:
    """What to append so the log says what memory says, for the group and its members marked
    ``dirty`` (a heartbeat re-encodes its own member, not the whole group): tombstones for members
    gone (current assignment, target, metadata: Kafka's order), then the records that changed, the
    group epoch last. ``group.persisted`` is updated as if the append succeeded."""
    ids = sorted(group.dirty)
    group.dirty.clear()
    now = group_records(group, ids)
    out: list[Record] = []
    gid = group.group_id
    gone = sorted({k for member_id in ids if member_id not in group.members for k in
                   (key(t, gid, member_id) for t in MEMBER_RECORD_TYPES) if k in group.persisted},
                  key=_tombstone_order)
    for k in gone:
        out.append((k, None))
        del group.persisted[k]
    for k, v in sorted(now.items(), key=lambda kv: _record_type(kv[0]) == GROUP_METADATA):
        if group.persisted.get(k) != v:
            out.append((k, v))
            group.persisted[k] = v
    return out


def tombstones(group: ShareGroup) -> list[Record]:
    """Deleting the group: every record it has in the log, the group's own records last."""
    return [(k, None) for k in sorted(group.persisted, key=_tombstone_order)]


def _record_type(k: bytes) -> int:
    return int.from_bytes(k[:2], "big", signed=True)


def _tombstone_order(k: bytes) -> tuple[int, bytes]:
    record_type = _record_type(k)
    rank = MEMBER_RECORD_TYPES.index(record_type) if record_type in MEMBER_RECORD_TYPES else len(MEMBER_RECORD_TYPES)
    return rank + (record_type == GROUP_METADATA), k


# ------------------------------------------------------------------------------------ load

def load(records: Iterable[Record]) -> dict[str, ShareGroup]:
    """Share groups rebuilt from a partition's records (the last record per key wins, a tombstone
    deletes). A group exists while its ShareGroupMetadata record does; a member needs its
    metadata record (a write cut short can leave only part of a member: it is dropped, and it
    rejoins when told it is unknown)."""
    latest = latest_by_key(records, SHARE_RECORD_TYPES)
    groups: dict[str, ShareGroup] = {}
    for (record_type, gid, _), v in latest.values():
        if record_type == GROUP_METADATA and v is not None:
            try:
                groups[gid] = _group(gid, Reader(v[2:]))
            except (ProtocolError, ValueError) as exc:
                log.error("skipping unreadable share group record of %s: %s", gid, exc)
    members: dict[tuple[str, str], ShareMember] = {}
    described: set[tuple[str, str]] = set()
    for (record_type, gid, member_id), v in latest.values():
        group = groups.get(gid)
        if group is None or v is None or member_id is None:
            if group is not None and v is not None and record_type == TARGET_ASSIGNMENT_METADATA:
                group.assignment_epoch = _int32_value(v)
            elif group is not None and v is not None and record_type == STATE_PARTITION_METADATA:
                _read_group_record(group, v)
            continue
        m = members.setdefault((gid, member_id), ShareMember(member_id))
        try:
            if _apply(m, record_type, Reader(v[2:])):
                described.add((gid, member_id))
        except (ProtocolError, ValueError) as exc:
            log.error("skipping unreadable share group record of %s: %s", gid, exc)
    for (gid, member_id), m in members.items():
        if (gid, member_id) in described:
            groups[gid].members[member_id] = m
    for k, ((_, gid, _), v) in latest.items():
        if gid in groups and v is not None:
            groups[gid].persisted[k] = v
    return groups


def _group(gid: str, r: Reader) -> ShareGroup:
    group = ShareGroup(gid)
    group.epoch = r.int32()
    group.metadata_hash = r.int64()
    return group


def _read_group_record(group: ShareGroup, v: bytes) -> None:
    try:
        _read_state_partitions(group, Reader(v[2:]))
    except (ProtocolError, ValueError) as exc:
        log.error("skipping unreadable share group record of %s: %s", group.group_id, exc)


def _int32_value(v: bytes) -> int:
    return Reader(v[2:]).int32()


def _apply(m: ShareMember, record_type: int, r: Reader) -> bool:
    """Lay one member record over ``m``; True for its metadata record."""
    if record_type == MEMBER_METADATA:
        m.rack_id = r.nullable_string(True)
        m.client_id, m.client_host = r.string(True), r.string(True)
        m.subscribed = [r.string(True) for _ in range(r.array_length(True))]
        return True
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        m.epoch, m.previous_epoch = r.int32(), r.int32()
        r.int8()  # State: always STABLE for a share member
        m.assignment = _read_partitions(r)
    elif record_type == TARGET_ASSIGNMENT_MEMBER and not m.assignment:
        m.assignment = _read_partitions(r)
    return False

