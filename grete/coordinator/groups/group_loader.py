"""Rebuild groups and committed offsets from one partition of ``__consumer_offsets``.

Records are replayed in offset order and the last record per key wins; a tombstone deletes the key.
A group comes back if it has a GroupMetadata record or any committed offset. Groups with members are
restored as Stable in their stored generation with their stored assignments (a rebalance that was in
flight is lost, as in Kafka: members find out through heartbeats); groups without members as Empty.
KIP-848 consumer groups (key versions 3-8) are rebuilt by ``consumer_records.load``, KIP-1071 streams
groups (17-23) by ``streams_records.load``; share-group records (9-15) are the share groups' owner's
(``GroupContext.on_loaded``, ``share_records.load``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from grete.coordinator.groups import consumer_records, streams_records
from grete.coordinator.groups.group_state import CommittedOffset, Group, GroupState, Member
from grete.coordinator.groups.group_store import Record
from grete.coordinator.groups.group_types import CONSUMER_GROUP_TYPE, STREAMS_GROUP_TYPE
from grete.coordinator.groups.offsets_format import (
    FormatError,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)

log = logging.getLogger("grete.coordinator")


def replay(records: Iterable[Record]) -> tuple[dict[str, GroupValue], dict[str, dict[tuple[str, int], OffsetValue]]]:
    """The surviving group values and offsets after replaying the records."""
    groups: dict[str, GroupValue] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
    for key_bytes, value_bytes in records:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                group_offsets = offsets.setdefault(key.group, {})
                tp = (key.topic, key.partition)
                if value_bytes is None:
                    group_offsets.pop(tp, None)
                else:
                    group_offsets[tp] = decode_offset_value(value_bytes)
            elif isinstance(key, GroupKey):
                if value_bytes is None:
                    groups.pop(key.group, None)
                else:
                    groups[key.group] = decode_group_value(value_bytes)
        except FormatError as exc:
            # One bad record must not keep every group of the partition from loading.
            log.error("skipping unreadable __consumer_offsets record: %s", exc)
    return groups, {g: tps for g, tps in offsets.items() if tps}


def build_groups(records: Iterable[Record], now_ms: int) -> list[Group]:
    records = list(records)
    values, offsets = replay(records)
    consumer_groups = consumer_records.load(records)
    streams_groups = streams_records.load(records)
    groups = []
    for group_id in sorted(set(values) | set(offsets) | set(consumer_groups) | set(streams_groups)):
        value = values.get(group_id)
        group = group_from_value(group_id, value) if value else Group(group_id, GroupState.EMPTY, now_ms)
        if group_id in consumer_groups and not group.members:
            # A KIP-848 group: its members come back with their epochs and assignments.
            group.consumer = consumer_groups[group_id]
            group.protocol_type = CONSUMER_GROUP_TYPE
        elif group_id in streams_groups and not group.members:
            group.streams = streams_groups[group_id]
            group.protocol_type = STREAMS_GROUP_TYPE
        group.offsets = {
            tp: CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
            for tp, v in offsets.get(group_id, {}).items()}
        groups.append(group)
    return groups


def group_from_value(group_id: str, value: GroupValue) -> Group:
    state = GroupState.STABLE if value.members else GroupState.EMPTY
    group = Group(group_id, state, value.current_state_timestamp, value.generation,
                  protocol_type=value.protocol_type or None, protocol_name=value.protocol,
                  leader_id=value.leader if value.members else None)
    for m in value.members:
        protocols = [(value.protocol, m.subscription)] if value.protocol is not None else []
        member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                        m.session_timeout, value.protocol_type, protocols, assignment=m.assignment)
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    group.supported_protocols = Counter(name for m in group.members.values() for name in set(m.protocol_names))
    if group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


def staged_offsets(records: Iterable[Record]) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    """The offsets an open transaction wrote, by group (TxnOffsetCommit writes offsets only)."""
    _, offsets = replay(records)
    return {group: {tp: CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                                        v.expire_timestamp) for tp, v in tps.items()}
            for group, tps in offsets.items()}
