"""The ``__consumer_offsets`` records of KIP-848 consumer groups, in Kafka 4.3.1's formats (its
kafka-group-coordinator schemas), so a Kafka broker could load what grete writes and the other way.

A key is an int16 record type then the key struct (classic strings); a value is an int16 version
(0) then the value struct in the flexible encoding (compact strings and arrays, tagged fields):

* 3 ConsumerGroupMetadata (GroupId) -> Epoch int32, tags (MetadataHash: not written)
* 5 ConsumerGroupMemberMetadata (GroupId, MemberId) -> InstanceId?, RackId?, ClientId, ClientHost,
  SubscribedTopicNames[], SubscribedTopicRegex?, RebalanceTimeoutMs, ServerAssignor?, tag 0
  ClassicMemberMetadata (members using the classic protocol: session timeout, JoinGroup protocols)
* 6 ConsumerGroupTargetAssignmentMetadata (GroupId) -> AssignmentEpoch int32, tags
* 7 ConsumerGroupTargetAssignmentMember (GroupId, MemberId) -> TopicPartitions[{TopicId, Partitions[]}]
* 8 ConsumerGroupCurrentMemberAssignment (GroupId, MemberId) -> MemberEpoch, PreviousMemberEpoch,
  State int8, AssignedPartitions[...], PartitionsPendingRevocation[...]

Type 4 (ConsumerGroupPartitionMetadata) is deprecated since Kafka 4.1 (the metadata hash replaced
it): grete writes none and ignores it on load, and 16 (resolved regexes) is recomputed, not stored.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable

from grete.coordinator.groups.consumer_assignors import Assignment
from grete.coordinator.groups.consumer_state import ClassicMeta, ConsumerGroup, ConsumerMember, MemberState
from grete.coordinator.groups.coordinator_records import Record, key, latest_by_key, typed_key, value_writer
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError

log = logging.getLogger("grete.coordinator")

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
CONSUMER_RECORD_TYPES = frozenset({GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA,
                                   TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION})
MEMBER_RECORD_TYPES = (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA)


# ------------------------------------------------------------------------------------ keys

def decode_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group id, member id or regex) of a consumer-group key; None for other records."""
    return typed_key(data, CONSUMER_RECORD_TYPES)


# ---------------------------------------------------------------------------------- values

def _partitions(w: Writer, assignment: Assignment) -> None:
    by_topic: dict[uuid.UUID, list[int]] = defaultdict(list)
    for topic_id, partition in sorted(assignment):
        by_topic[topic_id].append(partition)
    w.length(len(by_topic), True)
    for topic_id, partitions in by_topic.items():
        w.uuid(topic_id)
        w.length(len(partitions), True)
        for p in partitions:
            w.int32(p)
        w.uvarint(0)


def _read_partitions(r: Reader) -> Assignment:
    result: set[tuple[uuid.UUID, int]] = set()
    for _ in range(r.array_length(True)):
        topic_id = r.uuid()
        result.update((topic_id, r.int32()) for _ in range(r.array_length(True)))
        r.tagged_fields()  # AssignmentEpochs (tag 0) is Kafka's own bookkeeping
    return frozenset(result)


def group_metadata_value(epoch: int) -> bytes:
    w = value_writer()
    w.int32(epoch)
    w.uvarint(0)
    return w.getvalue()


def target_metadata_value(assignment_epoch: int) -> bytes:
    return group_metadata_value(assignment_epoch)  # the same layout: an int32 and tags


def member_metadata_value(m: ConsumerMember) -> bytes:
    w = value_writer()
    w.string(m.instance_id, True)
    w.string(m.rack_id, True)
    w.string(m.client_id, True)
    w.string(m.client_host, True)
    w.length(len(m.subscribed_topic_names), True)
    for name in m.subscribed_topic_names:
        w.string(name, True)
    w.string(m.subscribed_topic_regex, True)
    w.int32(m.rebalance_timeout_ms)
    w.string(m.server_assignor, True)
    if m.classic is None:
        w.uvarint(0)
    else:
        # Tag 0, ClassicMemberMetadata: SessionTimeoutMs, SupportedProtocols[{Name, Metadata}].
        t = Writer()
        t.int32(m.classic.session_timeout_ms)
        t.length(len(m.classic.protocols), True)
        for name, metadata in m.classic.protocols:
            t.string(name, True)
            t.binary(metadata, True)
            t.uvarint(0)
        t.uvarint(0)
        tagged = t.getvalue()
        w.uvarint(1)
        w.uvarint(0)
        w.uvarint(len(tagged))
        w.raw(tagged)
    return w.getvalue()


def _read_classic(data: bytes | memoryview) -> ClassicMeta:
    r = Reader(data)
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(r.array_length(True)):
        name = r.string(True)
        protocols.append((name, bytes(r.binary(True))))
        r.tagged_fields()
    return ClassicMeta(session_timeout_ms, tuple(protocols))


def target_member_value(assignment: Assignment) -> bytes:
    w = value_writer()
    _partitions(w, assignment)
    w.uvarint(0)
    return w.getvalue()


def current_assignment_value(m: ConsumerMember) -> bytes:
    w = value_writer()
    w.int32(m.member_epoch)
    w.int32(m.previous_member_epoch)
    w.int8(int(m.state))
    _partitions(w, m.assigned)
    _partitions(w, m.pending_revocation)
    w.uvarint(0)
    return w.getvalue()


# --------------------------------------------------------------------------- group records

def group_records(cg: ConsumerGroup, member_ids: Iterable[str]) -> dict[bytes, bytes]:
    """The records that describe the group and the named members as they are now (members that are
    gone have none)."""
    gid = cg.group_id
    records = {key(GROUP_METADATA, gid): group_metadata_value(cg.group_epoch),
               key(TARGET_ASSIGNMENT_METADATA, gid): target_metadata_value(cg.assignment_epoch)}
    for member_id in member_ids:
        m = cg.members.get(member_id)
        if m is None:
            continue
        records[key(MEMBER_METADATA, gid, member_id)] = member_metadata_value(m)
        records[key(TARGET_ASSIGNMENT_MEMBER, gid, member_id)] = target_member_value(cg.target.get(member_id, frozenset()))
        records[key(CURRENT_MEMBER_ASSIGNMENT, gid, member_id)] = current_assignment_value(m)
    return records


def changes(cg: ConsumerGroup, member_ids: Iterable[str]) -> list[Record]:
    """What to append so the log says what memory says, for the group and these members: changed
    records, and tombstones (current assignment, target, metadata: Kafka's order) for members gone.
    ``cg.persisted`` is updated as if the append succeeded."""
    ids = list(dict.fromkeys(member_ids))
    now = group_records(cg, ids)
    out: list[Record] = []
    gid = cg.group_id
    for member_id in ids:
        for record_type in MEMBER_RECORD_TYPES:
            k = key(record_type, gid, member_id)
            if k not in now and k in cg.persisted:
                out.append((k, None))
                del cg.persisted[k]
    # The group epoch goes last (sorted() is stable: False before True), as Kafka orders it.
    for k, v in sorted(now.items(), key=lambda kv: kv[0][:2] == b"\x00\x03"):
        if cg.persisted.get(k) != v:
            out.append((k, v))
            cg.persisted[k] = v
    return out


def tombstones(cg: ConsumerGroup) -> list[Record]:
    """Deleting the group: every record it has in the log."""
    return [(k, None) for k in cg.persisted]


# ------------------------------------------------------------------------------------ load

def load(records: Iterable[Record]) -> dict[str, ConsumerGroup]:
    """Consumer groups rebuilt from the partition's records (last record per key wins; a tombstone
    deletes; any order). A group exists while its ConsumerGroupMetadata record does."""
    latest = latest_by_key(records, CONSUMER_RECORD_TYPES)
    groups: dict[str, ConsumerGroup] = {}
    for (record_type, gid, _), v in latest.values():
        if record_type == GROUP_METADATA and v is not None and len(v) >= 6:
            groups[gid] = ConsumerGroup(gid, group_epoch=Reader(v[2:]).int32())
    for (record_type, gid, second), v in latest.values():
        cg = groups.get(gid)
        if cg is None or v is None or record_type in (GROUP_METADATA, PARTITION_METADATA, REGULAR_EXPRESSION):
            continue
        try:
            _apply(cg, record_type, second or "", Reader(v[2:]))
        except (ProtocolError, ValueError) as exc:
            # One bad record must not keep the partition's other groups from loading.
            log.error("skipping unreadable consumer group record of %s: %s", gid, exc)
    for k, ((_, gid, _), v) in latest.items():
        if gid in groups and v is not None:
            groups[gid].persisted[k] = v
    described = {(gid, second) for (record_type, gid, second), v in latest.values()
                 if record_type == MEMBER_METADATA and v is not None}
    for cg in groups.values():
        _finish(cg, {mid for gid, mid in described if gid == cg.group_id})
    return groups


def _member(cg: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = cg.members.get(member_id)
    if member is None:
        member = cg.members[member_id] = ConsumerMember(member_id)
    return member


def _apply(cg: ConsumerGroup, record_type: int, member_id: str, r: Reader) -> None:
    if record_type == TARGET_ASSIGNMENT_METADATA:
        cg.assignment_epoch = r.int32()
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        cg.target[member_id] = _read_partitions(r)
    elif record_type == MEMBER_METADATA:
        m = _member(cg, member_id)
        m.instance_id, m.rack_id = r.nullable_string(True), r.nullable_string(True)
        m.client_id, m.client_host = r.string(True), r.string(True)
        m.subscribed_topic_names = tuple(r.string(True) for _ in range(r.array_length(True)))
        m.subscribed_topic_regex = r.nullable_string(True)
        m.rebalance_timeout_ms = r.int32()
        m.server_assignor = r.nullable_string(True)
        m.classic = next((_read_classic(data) for tag, data in r.tagged_fields() if tag == 0), None)
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        m = _member(cg, member_id)
        m.member_epoch, m.previous_member_epoch = r.int32(), r.int32()
        state = r.int8()
        m.state = MemberState(state) if state in MemberState._value2member_map_ else MemberState.UNKNOWN
        m.assigned, m.pending_revocation = _read_partitions(r), _read_partitions(r)


def _finish(cg: ConsumerGroup, described: set[str | None]) -> None:
    """Indexes rebuilt from the members; a member without its metadata record (a write cut short
    can leave that) is dropped: it rejoins when told it is unknown."""
    for member_id in [mid for mid in cg.members if mid not in described]:
        del cg.members[member_id]
    cg.target = {mid: t for mid, t in cg.target.items() if mid in cg.members}
    for m in cg.members.values():
        if m.instance_id is not None:
            cg.static_members[m.instance_id] = m.member_id
        for tp in m.owned():
            cg.owners[tp] = m.member_id
