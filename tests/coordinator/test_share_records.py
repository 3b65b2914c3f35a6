"""Share groups' records in __consumer_offsets (grete.coordinator.share.share_records): what a group writes
loads back as the same group; members that leave are tombstoned before the group epoch; a deleted
group is gone; a half-written member is dropped; a reloaded group keeps its epoch unless its topics
changed meanwhile. The byte layout against Kafka 4.3.1 is checked in
compat-tests/wire/test_wire_share_restart.py (grete decodes the records Kafka wrote)."""

from __future__ import annotations

import uuid

from grete.coordinator.groups.coordinator_records import Record, key
from grete.coordinator.share import share_records
from grete.coordinator.share.share_group import ShareGroup
from grete.coordinator.share.share_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    STATE_PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
)
from grete.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"a": (T1, 3), "b": (T2, 1)}


def join(group: ShareGroup, member_id: str, topics: list[str], view: dict[str, tuple[uuid.UUID, int]] = TOPICS,
         epoch: int = 0) -> int:
    result = group.heartbeat(member_id, epoch, rack_id="r1" if member_id == "m1" else None, subscribed=topics,
                             client_id=f"client-{member_id}", client_host="/10.0.0.1", topics=view, max_size=10)
    assert result.error == ErrorCode.NONE and result.member is not None
    return result.member.epoch


def snapshot(group: ShareGroup) -> tuple[object, ...]:
    return (group.group_id, group.epoch, group.assignment_epoch, group.metadata_hash,
            sorted((m.member_id, m.epoch, m.previous_epoch, m.rack_id, m.client_id, m.client_host,
                    sorted(m.subscribed), m.assignment) for m in group.members.values()))


def record_types(records: list[Record]) -> list[tuple[int, bool]]:
    return [(int.from_bytes(k[:2], "big"), v is None) for k, v in records]


def test_what_a_group_writes_loads_back_as_the_same_group() -> None:
    group = ShareGroup("g")
    log = share_records.changes(group)
    join(group, "m1", ["a"])
    log += share_records.changes(group)
    join(group, "m2", ["a", "b"])
    second = share_records.changes(group)
    assert record_types(second)[-1] == (GROUP_METADATA, False)  # the group epoch goes last
    log += second
    assert share_records.changes(group) == []  # nothing changed, nothing written
    join(group, "m1", ["a"], epoch=group.members["m1"].epoch)  # m1 takes the new assignment epoch
    caught_up = share_records.changes(group)
    assert record_types(caught_up) == [(CURRENT_MEMBER_ASSIGNMENT, False)]
    log += caught_up
    join(group, "m1", ["a"], epoch=group.members["m1"].epoch)  # a plain heartbeat writes nothing
    assert group.dirty == {"m1"}
    assert share_records.changes(group) == [] and not group.dirty
    loaded = share_records.load(log)["g"]
    assert snapshot(loaded) == snapshot(group)
    assert loaded.persisted == group.persisted


def test_a_member_that_leaves_is_tombstoned_before_the_group_epoch() -> None:
    group = ShareGroup("g")
    join(group, "m1", ["a"])
    join(group, "m2", ["a"])
    log = share_records.changes(group)
    assert group.heartbeat("m2", -1, rack_id=None, subscribed=None, client_id="", client_host="",
                           topics=TOPICS, max_size=10).error == ErrorCode.NONE
    left = share_records.changes(group)
    assert record_types(left)[:3] == [(CURRENT_MEMBER_ASSIGNMENT, True), (TARGET_ASSIGNMENT_MEMBER, True),
                                      (MEMBER_METADATA, True)]
    assert record_types(left)[-1] == (GROUP_METADATA, False)
    loaded = share_records.load(log + left)["g"]
    assert list(loaded.members) == ["m1"] and loaded.epoch == group.epoch


def test_a_deleted_group_is_gone_and_others_stay() -> None:
    gone, kept = ShareGroup("gone"), ShareGroup("kept")
    join(gone, "m1", ["a"])
    join(kept, "m2", ["b"])
    log = share_records.changes(gone) + share_records.changes(kept)
    gone.members.clear()
    log += share_records.tombstones(gone)
    assert set(share_records.load(log)) == {"kept"}


def test_the_partitions_a_group_was_assigned_outlive_its_members() -> None:
    """ShareGroupStatePartitionMetadata: every partition ever assigned is written once, kept when the
    members leave, and loaded back by another coordinator (DescribeShareGroupOffsets without topics
    reads it); deleting the group tombstones it."""
    group = ShareGroup("g")
    join(group, "m1", ["a"])
    log = share_records.changes(group)
    assert (STATE_PARTITION_METADATA, False) in record_types(log)
    join(group, "m2", ["b"])
    log += share_records.changes(group)
    for member_id in ("m1", "m2"):
        group.heartbeat(member_id, -1, rack_id=None, subscribed=None, client_id="", client_host="", topics=TOPICS,
                        max_size=10)
    left = share_records.changes(group)
    assert STATE_PARTITION_METADATA not in [t for t, _ in record_types(left)]  # unchanged: not written again
    loaded = share_records.load(log + left)["g"]
    assert not loaded.members
    assert {t: (i.name, i.partitions) for t, i in loaded.initialized.items()} == {T1: ("a", {0, 1, 2}),
                                                                                 T2: ("b", {0})}
    assert loaded.initialized[T1].create_ms == group.initialized[T1].create_ms > 0
    assert (STATE_PARTITION_METADATA, True) in record_types(share_records.tombstones(loaded))


def test_a_member_without_its_metadata_record_is_dropped() -> None:
    group = ShareGroup("g")
    join(group, "m1", ["a"])
    join(group, "m2", ["a"])
    log = [(k, v) for k, v in share_records.changes(group)
           if k != key(MEMBER_METADATA, "g", "m2")]
    assert list(share_records.load(log)["g"].members) == ["m1"]


def test_other_records_of_the_partition_are_not_share_groups() -> None:
    offset_commit_key = b"\x00\x01" + b"\x00\x01g" + b"\x00\x01a" + b"\x00\x00\x00\x00"
    consumer_group_key = b"\x00\x03\x00\x01g"
    assert share_records.load([(offset_commit_key, b"x"), (consumer_group_key, b"y")]) == {}


def test_a_reloaded_group_keeps_its_epoch_unless_its_topics_changed() -> None:
    group = ShareGroup("g")
    epoch = join(group, "m1", ["a"])
    log = share_records.changes(group)
    same = share_records.load(log)["g"]
    assert join(same, "m1", ["a"], epoch=epoch) == epoch and same.epoch == group.epoch
    grown = share_records.load(log)["g"]
    bigger = {**TOPICS, "a": (T1, 4)}
    assert join(grown, "m1", ["a"], view=bigger, epoch=epoch) == epoch + 1
    assert grown.members["m1"].assignment == {T1: [0, 1, 2, 3]}


def test_unreadable_records_are_skipped_and_the_rest_loads() -> None:
    group = ShareGroup("g")
    join(group, "m1", ["a"])
    log = share_records.changes(group)
    broken = [(key(GROUP_METADATA, "bad"), b"\x00"),
              (key(MEMBER_METADATA, "g", "m2"), b"\x00\x00\xff\xff"),
              (b"\x00", b"x")]
    loaded = share_records.load(broken + log)
    assert set(loaded) == {"g"} and list(loaded["g"].members) == ["m1"]
