"""The ``__consumer_offsets`` records of streams groups (KIP-1071), in Kafka 4.3.1's formats (its
kafka-group-coordinator 4.3.1 schemas, checked against the jar's generated classes), so a Kafka broker
could load what grete writes and the other way.

A key is an int16 record type then the key struct (classic strings); a value is an int16 version (0)
then the value struct in the flexible encoding (compact strings and arrays, tagged fields):

* 17 StreamsGroupMetadata (GroupId) -> Epoch int32, MetadataHash int64 (grete writes 0: it
  re-checks the topics on load), tag 1 LastAssignmentConfigs [{Key, Value}] (``num.standby.replicas``,
  as Kafka keys it: a restart under the same setting does not re-assign); tag 0 is not written
* 19 StreamsGroupMemberMetadata (GroupId, MemberId) -> InstanceId?, RackId?, ClientId, ClientHost,
  RebalanceTimeoutMs, TopologyEpoch, ProcessId, UserEndpoint? {Host, Port uint16}, ClientTags[]
* 20 StreamsGroupTargetAssignmentMetadata (GroupId) -> AssignmentEpoch int32, tags
* 21 StreamsGroupTargetAssignmentMember (GroupId, MemberId) -> ActiveTasks[], StandbyTasks[],
  WarmupTasks[] (each {SubtopologyId, Partitions[]})
* 22 StreamsGroupCurrentMemberAssignment (GroupId, MemberId) -> MemberEpoch, PreviousMemberEpoch,
  State int8, the three task lists, then the three lists pending revocation
* 23 StreamsGroupTopology (GroupId) -> Epoch, Subtopologies[] as the heartbeat sends them

Type 18 (partition metadata) is deprecated in Kafka 4.3: grete writes none and ignores it on load.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from grete.coordinator.groups.coordinator_records import Record, key, latest_by_key, typed_key, value_writer
from grete.coordinator.groups.streams_state import MemberState, StreamsGroup, StreamsMember, Tasks
from grete.coordinator.groups.streams_topology import CopartitionGroup, Subtopology, TopicInfo, Topology
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError

log = logging.getLogger("grete.coordinator")

GROUP_METADATA = 17
PARTITION_METADATA = 18
MEMBER_METADATA = 19
TARGET_ASSIGNMENT_METADATA = 20
TARGET_ASSIGNMENT_MEMBER = 21
CURRENT_MEMBER_ASSIGNMENT = 22
TOPOLOGY = 23
STREAMS_RECORD_TYPES = frozenset(range(GROUP_METADATA, TOPOLOGY + 1))
MEMBER_RECORD_TYPES = (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA)


def decode_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group id, member id) of a streams-group key; None for other records."""
    return typed_key(data, STREAMS_RECORD_TYPES)


# ---------------------------------------------------------------------------------- values

def _strings(w: Writer, values: Iterable[str]) -> None:
    items = list(values)
    w.length(len(items), True)
    for v in items:
        w.string(v, True)


def _key_values(w: Writer, pairs: Iterable[tuple[str, str]]) -> None:
    items = list(pairs)
    w.length(len(items), True)
    for k, v in items:
        w.string(k, True)
        w.string(v, True)
        w.uvarint(0)


def _tasks(w: Writer, tasks: Tasks) -> None:
    by_sub: dict[str, list[int]] = defaultdict(list)
    for sub, p in sorted(tasks):
        by_sub[sub].append(p)
    w.length(len(by_sub), True)
    for sub, partitions in by_sub.items():
        w.string(sub, True)
        _int32s(w, partitions)
        w.uvarint(0)


def _int32s(w: Writer, values: list[int]) -> None:
    w.length(len(values), True)
    for v in values:
        w.int32(v)


def _topic_infos(w: Writer, infos: tuple[TopicInfo, ...]) -> None:
    w.length(len(infos), True)
    for info in infos:
        w.string(info.name, True)
        w.int32(info.partitions)
        w.int16(info.replication_factor)
        _key_values(w, info.configs)
        w.uvarint(0)


STANDBY_REPLICAS_KEY = "num.standby.replicas"


def group_metadata_value(epoch: int, standby_replicas: int) -> bytes:
    w = value_writer()
    w.int32(epoch)
    w.int64(0)
    configs = Writer()
    _key_values(configs, [(STANDBY_REPLICAS_KEY, str(standby_replicas))])
    tagged = configs.getvalue()
    w.uvarint(1)  # one tagged field: 1, LastAssignmentConfigs
    w.uvarint(1)
    w.uvarint(len(tagged))
    w.raw(tagged)
    return w.getvalue()


def target_metadata_value(assignment_epoch: int) -> bytes:
    w = value_writer()
    w.int32(assignment_epoch)
    w.uvarint(0)
    return w.getvalue()


def topology_value(topology: Topology) -> bytes:
    w = value_writer()
    w.int32(topology.epoch)
    w.length(len(topology.subtopologies), True)
    for sub in topology.subtopologies:
        w.string(sub.subtopology_id, True)
        _strings(w, sub.source_topics)
        _strings(w, sub.source_topic_regex)
        _topic_infos(w, sub.state_changelog_topics)
        _strings(w, sub.repartition_sink_topics)
        _topic_infos(w, sub.repartition_source_topics)
        w.length(len(sub.copartition_groups), True)
        for group in sub.copartition_groups:
            for indexes in (group.source_topics, group.source_topic_regex, group.repartition_source_topics):
                w.length(len(indexes), True)
                for i in indexes:
                    w.int16(i)
            w.uvarint(0)
        w.uvarint(0)
    w.uvarint(0)
    return w.getvalue()


def member_metadata_value(m: StreamsMember) -> bytes:
    w = value_writer()
    w.string(m.instance_id, True)
    w.string(m.rack_id, True)
    w.string(m.client_id, True)
    w.string(m.client_host, True)
    w.int32(m.rebalance_timeout_ms)
    w.int32(m.topology_epoch)
    w.string(m.process_id, True)
    if m.user_endpoint is None:
        w.int8(-1)
    else:
        w.int8(1)
        w.string(m.user_endpoint[0], True)
        w.uint16(m.user_endpoint[1])
        w.uvarint(0)
    _key_values(w, m.client_tags)
    w.uvarint(0)
    return w.getvalue()


def target_member_value(active: Tasks, standby: Tasks) -> bytes:
    w = value_writer()
    _tasks(w, active)
    _tasks(w, standby)
    _tasks(w, frozenset())  # warm-up tasks: grete assigns none
    w.uvarint(0)
    return w.getvalue()


def current_assignment_value(m: StreamsMember) -> bytes:
    w = value_writer()
    w.int32(m.member_epoch)
    w.int32(m.previous_member_epoch)
    w.int8(int(m.state))
    for tasks in (m.assigned, m.standby, frozenset(), m.pending_revocation, m.pending_standby_revocation, frozenset()):
        _tasks(w, tasks)
    w.uvarint(0)
    return w.getvalue()


# --------------------------------------------------------------------------- group records

def group_records(sg: StreamsGroup, member_ids: Iterable[str]) -> dict[bytes, bytes]:
    """The records that describe the group and the named members as they are now (members that are
    gone have none)."""
    gid = sg.group_id
    records = {key(GROUP_METADATA, gid): group_metadata_value(sg.group_epoch, sg.standby_replicas),
               key(TARGET_ASSIGNMENT_METADATA, gid): target_metadata_value(sg.assignment_epoch)}
    if sg.topology is not None:
        records[key(TOPOLOGY, gid)] = topology_value(sg.topology)
    for member_id in member_ids:
        m = sg.members.get(member_id)
        if m is None:
            continue
        records[key(MEMBER_METADATA, gid, member_id)] = member_metadata_value(m)
        records[key(TARGET_ASSIGNMENT_MEMBER, gid, member_id)] = target_member_value(
            sg.target.get(member_id, frozenset()), sg.target_standby.get(member_id, frozenset()))
        records[key(CURRENT_MEMBER_ASSIGNMENT, gid, member_id)] = current_assignment_value(m)
    return records


def changes(sg: StreamsGroup, member_ids: Iterable[str]) -> list[Record]:
    """What to append so the log says what memory says, for the group and these members: changed
    records, and tombstones for members gone. ``sg.persisted`` is updated as if the append succeeded."""
    ids = list(dict.fromkeys(member_ids))
    now = group_records(sg, ids)
    out: list[Record] = []
    gid = sg.group_id
    for member_id in ids:
        for record_type in MEMBER_RECORD_TYPES:
            k = key(record_type, gid, member_id)
            if k not in now and k in sg.persisted:
                out.append((k, None))
                del sg.persisted[k]
    # The group epoch goes last, as Kafka orders it: a group record is never ahead of its members'.
    for k, v in sorted(now.items(), key=lambda kv: kv[0][:2] == GROUP_METADATA.to_bytes(2, "big")):
        if sg.persisted.get(k) != v:
            out.append((k, v))
            sg.persisted[k] = v
    return out


def tombstones(sg: StreamsGroup) -> list[Record]:
    """Deleting the group: every record it has in the log."""
    return [(k, None) for k in sg.persisted]


# ------------------------------------------------------------------------------------ load

def load(records: Iterable[Record]) -> dict[str, StreamsGroup]:
    """Streams groups rebuilt from the partition's records (last record per key wins; a tombstone
    deletes). A group exists while its StreamsGroupMetadata record does."""
    latest = latest_by_key(records, STREAMS_RECORD_TYPES)
    groups: dict[str, StreamsGroup] = {}
    for (record_type, gid, _), v in latest.values():
        if record_type == GROUP_METADATA and v is not None and len(v) >= 6:
            groups[gid] = _group(gid, Reader(v[2:]))
    for (record_type, gid, second), v in latest.values():
        sg = groups.get(gid)
        if sg is None or v is None or record_type in (GROUP_METADATA, PARTITION_METADATA):
            continue
        try:
            _apply(sg, record_type, second or "", Reader(v[2:]))
        except (ProtocolError, ValueError) as exc:
            log.error("skipping unreadable streams group record of %s: %s", gid, exc)
    for k, ((_, gid, _), v) in latest.items():
        if gid in groups and v is not None:
            groups[gid].persisted[k] = v
    described = {(gid, second) for (record_type, gid, second), v in latest.values()
                 if record_type == MEMBER_METADATA and v is not None}
    for sg in groups.values():
        _finish(sg, {mid for gid, mid in described if gid == sg.group_id})
    return groups


def _group(group_id: str, r: Reader) -> StreamsGroup:
    sg = StreamsGroup(group_id, group_epoch=r.int32())
    try:
        r.int64()  # the metadata hash: recomputed (grete re-checks the topics at the next heartbeat)
        for tag, data in r.tagged_fields():
            if tag == 1:
                configs = dict(_read_key_values(Reader(data)))
                sg.standby_replicas = int(configs.get(STANDBY_REPLICAS_KEY, "0"))
    except (ProtocolError, ValueError) as exc:
        log.error("streams group %s: unreadable metadata tags: %s", group_id, exc)
    return sg


def _member(sg: StreamsGroup, member_id: str) -> StreamsMember:
    member = sg.members.get(member_id)
    if member is None:
        member = sg.members[member_id] = StreamsMember(member_id)
    return member


def _read_strings(r: Reader) -> tuple[str, ...]:
    return tuple(r.string(True) for _ in range(r.array_length(True)))


def _read_key_values(r: Reader) -> tuple[tuple[str, str], ...]:
    pairs = []
    for _ in range(r.array_length(True)):
        k, v = r.string(True), r.string(True)
        r.tagged_fields()
        pairs.append((k, v))
    return tuple(pairs)


def _read_tasks(r: Reader) -> Tasks:
    tasks: set[tuple[str, int]] = set()
    for _ in range(r.array_length(True)):
        sub = r.string(True)
        tasks.update((sub, r.int32()) for _ in range(r.array_length(True)))
        r.tagged_fields()
    return frozenset(tasks)


def _read_topic_infos(r: Reader) -> tuple[TopicInfo, ...]:
    infos = []
    for _ in range(r.array_length(True)):
        name, partitions, rf = r.string(True), r.int32(), r.int16()
        configs = _read_key_values(r)
        r.tagged_fields()
        infos.append(TopicInfo(name, partitions, rf, configs))
    return tuple(infos)


def _read_topology(r: Reader) -> Topology:
    epoch = r.int32()
    subs = []
    for _ in range(r.array_length(True)):
        sub_id = r.string(True)
        sources, regexes = _read_strings(r), _read_strings(r)
        changelogs = _read_topic_infos(r)
        sinks = _read_strings(r)
        repartition_sources = _read_topic_infos(r)
        groups = []
        for _ in range(r.array_length(True)):
            lists = [tuple(r.int16() for _ in range(r.array_length(True))) for _ in range(3)]
            r.tagged_fields()
            groups.append(CopartitionGroup(lists[0], lists[1], lists[2]))
        r.tagged_fields()
        subs.append(Subtopology(sub_id, sources, regexes, changelogs, sinks, repartition_sources, tuple(groups)))
    return Topology(epoch, tuple(subs))


def _apply(sg: StreamsGroup, record_type: int, member_id: str, r: Reader) -> None:
    if record_type == TARGET_ASSIGNMENT_METADATA:
        sg.assignment_epoch = r.int32()
    elif record_type == TOPOLOGY:
        sg.topology = _read_topology(r)
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        sg.target[member_id], sg.target_standby[member_id] = _read_tasks(r), _read_tasks(r)
    elif record_type == MEMBER_METADATA:
        m = _member(sg, member_id)
        m.instance_id, m.rack_id = r.nullable_string(True), r.nullable_string(True)
        m.client_id, m.client_host = r.string(True), r.string(True)
        m.rebalance_timeout_ms, m.topology_epoch = r.int32(), r.int32()
        m.process_id = r.string(True)
        if r.int8() >= 0:
            host, port = r.string(True), r.uint16()
            r.tagged_fields()
            m.user_endpoint = (host, port)
        m.client_tags = _read_key_values(r)
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        m = _member(sg, member_id)
        m.member_epoch, m.previous_member_epoch = r.int32(), r.int32()
        state = r.int8()
        m.state = MemberState(state) if state in MemberState._value2member_map_ else MemberState.UNKNOWN
        m.assigned, m.standby, _warmup = _read_tasks(r), _read_tasks(r), _read_tasks(r)
        m.pending_revocation, m.pending_standby_revocation = _read_tasks(r), _read_tasks(r)


def _finish(sg: StreamsGroup, described: set[str | None]) -> None:
    """Indexes rebuilt from the members; a member without its metadata record is dropped (it
    rejoins when told it is unknown). The topology is re-checked against the topics at the next
    heartbeat (``topics_seen`` is unknown)."""
    for member_id in [mid for mid in sg.members if mid not in described]:
        del sg.members[member_id]
    sg.target = {mid: t for mid, t in sg.target.items() if mid in sg.members}
    sg.target_standby = {mid: t for mid, t in sg.target_standby.items() if mid in sg.members}
    for m in sg.members.values():
        if m.instance_id is not None:
            sg.static_members[m.instance_id] = m.member_id
        for task in m.owned():
            sg.owners[task] = m.member_id
