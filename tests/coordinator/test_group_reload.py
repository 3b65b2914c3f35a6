"""Restarting the coordinator: groups and offsets come back from the __consumer_offsets records."""

from __future__ import annotations

import asyncio

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import LeaveMember, OffsetCommit
from grete.coordinator.groups.offsets_format import (
    GroupValue,
    MemberValue,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import (
    async_test,
    config,
    heartbeat,
    join,
    join_all,
    protos,
    settle,
    stable_group,
    started,
    sync,
    task,
)


async def populated(store: InMemoryOffsetsStore) -> tuple[GroupCoordinator, dict[str, str]]:
    coord = await started(store)
    a, b = await stable_group(coord, 2, group="live", protocols=protos("t"), session_ms=5000)
    await coord.commit_offsets(group_id="live", generation_id=1, member_id=a.member_id, group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("t", 0, 10, 3, "a"), OffsetCommit("t", 1, 20)])
    # A static group.
    st = await join(coord, "static", instance="inst", session_ms=5000)
    await sync(coord, st, "static", instance="inst", assignments=[(st.member_id, b"static-asg")])
    # A simple-commit group, one with an offset deleted, one deleted entirely, one emptied.
    await coord.commit_offsets(group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("x", 0, 1), OffsetCommit("x", 1, 2)])
    await coord.delete_offsets("simple", [("x", 1)])
    await coord.commit_offsets(group_id="gone", generation_id=-1, member_id="", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("x", 0, 1)])
    await coord.delete_groups(["gone"])
    (e,) = await stable_group(coord, 1, group="emptied")
    await coord.leave_group(group_id="emptied", members=[LeaveMember(e.member_id)])
    await settle()
    ids = {"a": a.member_id, "b": b.member_id, "static": st.member_id}
    return coord, ids


def snapshot(coord: GroupCoordinator) -> dict[str, object]:
    return {g.group_id: (coord.describe_group(g.group_id), coord.fetch_offsets(g.group_id, None),
                         coord.groups[g.group_id].generation_id)
            for g in coord.list_groups(None, None)}


@async_test
async def test_restart_reproduces_groups_and_offsets() -> None:
    store = InMemoryOffsetsStore()
    coord, ids = await populated(store)
    before = snapshot(coord)
    await coord.shutdown()
    assert set(before) == {"live", "static", "simple", "emptied"}

    for compacted in (False, True):
        if compacted:
            store.compact()
        again = await started(store)
        assert snapshot(again) == before
        assert again.describe_group("emptied").state == "Empty"
        assert again.groups["emptied"].generation_id == 2
        await again.shutdown()

    again = await started(store)
    # Members carry on in their generation; the static mapping survives (old ids stay fenced).
    assert await heartbeat(again, ids["a"], 1, group="live") is ErrorCode.NONE
    assert await heartbeat(again, "other", 1, group="static", instance="inst") is ErrorCode.FENCED_INSTANCE_ID
    rejoin = await join(again, "static", instance="inst")
    s = await sync(again, rejoin, "static", instance="inst")
    assert s.assignment == b"static-asg"  # replaced without a rebalance, keeping the assignment
    # A new member starts the next generation.
    new = task(join(again, "live"))
    await settle()
    old = await join_all(join(again, "live", member_id=ids["a"], protocols=protos("t")),
                         join(again, "live", member_id=ids["b"], protocols=protos("t")))
    assert {r.generation_id for r in [*old, await new]} == {2}
    await again.shutdown()


@async_test
async def test_restored_members_that_never_come_back_time_out() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    await stable_group(coord, 1, group="g", session_ms=150)
    await coord.shutdown()
    again = await started(store)
    assert again.describe_group("g").state == "Stable"
    await asyncio.sleep(0.3)
    assert again.describe_group("g").state == "Empty"
    await again.shutdown()


@async_test
async def test_group_record_written_at_sync_is_kafkas_group_metadata_value() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    res = await join(coord, "g", client_id="cid", instance="i1", session_ms=1234, rebalance_ms=4321)
    await sync(coord, res, "g", instance="i1", assignments=[(res.member_id, b"ASG")])
    partition, records = store.batches[-1]
    assert partition == coord.partition_for("g")
    (key, value), = records
    assert key == encode_group_key("g")
    group_value = decode_group_value(value or b"")
    assert value == encode_group_value(group_value, 3)  # written as v3
    assert group_value == GroupValue("consumer", 1, "range", res.member_id, group_value.current_state_timestamp, (
        MemberValue(res.member_id, "i1", "cid", "/127.0.0.1", 4321, 1234, protos()[0][1], b"ASG"),))
    await coord.shutdown()


@async_test
async def test_unknown_record_types_and_corrupt_records_are_skipped() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    await coord.commit_offsets(group_id="g", generation_id=-1, member_id="", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("t", 0, 5)])
    await coord.shutdown()
    p = coord.partition_for("g")
    store.partitions[p][:0] = [(b"\x00\x05\x00\x01x", b"whatever"),          # a KIP-848 record type
                               (encode_group_key("bad"), b"\x00\x03\x00"),    # truncated value
                               (b"\x00", b"")]                                 # truncated key
    again = await started(store)
    assert again.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5
    assert "bad" not in again.groups
    await again.shutdown()


@async_test
async def test_apis_during_load() -> None:
    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(config(), store)
    assert coord.availability_error() is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await join(coord)).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    starting = task(coord.start())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert coord.availability_error() is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (await join(coord)).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    # Like Kafka: heartbeats pass blindly, SyncGroup makes members rejoin.
    assert await heartbeat(coord, "m", 1) is ErrorCode.NONE
    s = await coord.sync_group(group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                               protocol_type=None, protocol_name=None, assignments=[])
    assert s.error is ErrorCode.REBALANCE_IN_PROGRESS
    await starting
    assert coord.availability_error() is ErrorCode.NONE
    await coord.shutdown()

