"""OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups and offset retention."""

from __future__ import annotations

import asyncio

from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import LeaveMember, OffsetAndMetadata, OffsetCommit
from grete.coordinator.groups.offsets_format import decode_key, decode_offset_value
from grete.protocol.errors import ErrorCode, KafkaError
from tests.coordinator._support import (
    async_test,
    join,
    protos,
    settle,
    stable_group,
    started,
    task,
)


def commit(coord, group="g", generation=-1, member="", instance=None, retention=-1, offsets=()):  # type: ignore[no-untyped-def]
    return coord.commit_offsets(group_id=group, generation_id=generation, member_id=member,
                                group_instance_id=instance, retention_ms=retention, offsets=list(offsets))


@async_test
async def test_member_commit_and_fetch() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    (a,) = await stable_group(coord, 1, protocols=protos("t"))
    result = await commit(coord, generation=1, member=a.member_id,
                          offsets=[OffsetCommit("t", 0, 42, 7, "meta"), OffsetCommit("t", 1, 5, -1, None)])
    assert result == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE}
    error, fetched = coord.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
    assert error is ErrorCode.NONE
    assert fetched == {("t", 0): OffsetAndMetadata(42, 7, "meta"), ("t", 1): OffsetAndMetadata(5, -1, ""),
                       ("t", 2): OffsetAndMetadata(-1, -1, "")}
    assert set(coord.fetch_offsets("g", None)[1]) == {("t", 0), ("t", 1)}
    # The records went to the group's partition of __consumer_offsets, in one batch.
    partition, records = store.batches[-1]
    assert partition == coord.partition_for("g")
    assert [decode_key(k) for k, _ in records][0].topic == "t"  # type: ignore[union-attr]
    assert decode_offset_value(records[0][1] or b"").offset == 42
    await coord.shutdown()


@async_test
async def test_member_commit_rejections() -> None:
    coord = await started()
    a, b = await stable_group(coord, 2)
    offsets = [OffsetCommit("t", 0, 1)]
    assert await commit(coord, generation=0, member=a.member_id, offsets=offsets) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert await commit(coord, generation=1, member="ghost", offsets=offsets) == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # A simple commit while the group has members.
    assert await commit(coord, offsets=offsets) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # PreparingRebalance still accepts commits from current members.
    rejoin = task(join(coord, member_id=a.member_id))
    await settle()
    assert await commit(coord, generation=1, member=b.member_id, offsets=offsets) == {("t", 0): ErrorCode.NONE}
    # CompletingRebalance: the member knows the generation but has no assignment yet.
    new_b = await join(coord, member_id=b.member_id)
    await rejoin
    assert await commit(coord, generation=2, member=new_b.member_id, offsets=offsets) == {
        ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    assert await commit(coord, group="unknown", generation=3, member="m", offsets=offsets) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION}
    await coord.shutdown()


@async_test
async def test_simple_commits_for_unknown_and_empty_groups() -> None:
    coord = await started()
    assert await commit(coord, group="simple", offsets=[OffsetCommit("t", 3, 9)]) == {("t", 3): ErrorCode.NONE}
    assert coord.fetch_offsets("simple", [("t", 3)])[1][("t", 3)].offset == 9
    listing = coord.list_groups(None, None)
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in listing] == [
        ("simple", "", "Empty", "classic")]
    # The empty group id is allowed for offset APIs (backwards compatibility), not for JoinGroup.
    assert await commit(coord, group="", offsets=[OffsetCommit("t", 0, 1)]) == {("t", 0): ErrorCode.NONE}
    # Without a generation any member id may commit for an Empty group, as on Kafka: a KIP-848
    # consumer with manually assigned partitions names the member id it generated itself.
    for group in ("manual", "simple"):
        assert await commit(coord, group=group, member="made-up-id", offsets=[OffsetCommit("t", 1, 5)]) == {
            ("t", 1): ErrorCode.NONE}
        assert coord.fetch_offsets(group, [("t", 1)])[1][("t", 1)].offset == 5
    await coord.shutdown()


@async_test
async def test_metadata_too_large_rejects_only_that_partition() -> None:
    coord = await started(offset_metadata_max_bytes=5)
    result = await commit(coord, offsets=[OffsetCommit("t", 0, 1, -1, "123456"), OffsetCommit("t", 1, 1, -1, "12345")])
    assert result == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t", 1): ErrorCode.NONE}
    await coord.shutdown()


@async_test
async def test_store_failures_map_to_kafka_codes_and_leave_offsets_unchanged() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    await commit(coord, offsets=[OffsetCommit("t", 0, 1)])
    store.fail_with = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert await commit(coord, offsets=[OffsetCommit("t", 0, 2)]) == {("t", 0): ErrorCode.NOT_COORDINATOR}
    store.fail_with = KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE)
    assert await commit(coord, offsets=[OffsetCommit("t", 0, 2)]) == {("t", 0): ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
    store.fail_with = OSError("disk full")
    assert await commit(coord, offsets=[OffsetCommit("t", 0, 2)]) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 1
    await coord.shutdown()


@async_test
async def test_fetch_for_unknown_group_and_require_stable() -> None:
    coord = await started()
    error, fetched = coord.fetch_offsets("nobody", [("t", 0)], require_stable=True)
    assert error is ErrorCode.NONE and fetched == {("t", 0): OffsetAndMetadata(-1)}
    assert coord.fetch_offsets("nobody", None) == (ErrorCode.NONE, {})
    # Transactional offsets staged for a producer make require_stable fetches unstable.
    await commit(coord, offsets=[OffsetCommit("t", 0, 1)])
    group = coord.groups["g"]
    group.pending_txn_offsets[7] = {("t", 0): group.offsets[("t", 0)]}
    assert coord.fetch_offsets("g", [("t", 0)], True)[1][("t", 0)].error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert coord.fetch_offsets("g", [("t", 0)], False)[1][("t", 0)].offset == 1
    await coord.shutdown()


@async_test
async def test_delete_offsets() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    a, b = await stable_group(coord, 2, protocols=protos("sub"))
    await commit(coord, generation=1, member=a.member_id,
                 offsets=[OffsetCommit("sub", 0, 1), OffsetCommit("other", 0, 2)])
    error, per = await coord.delete_offsets("g", [("sub", 0), ("other", 0)])
    assert error is ErrorCode.NONE
    assert per == {("sub", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): ErrorCode.NONE}
    assert coord.fetch_offsets("g", [("other", 0)])[1][("other", 0)].offset == -1
    tombstone = store.batches[-1][1]
    assert tombstone[0][1] is None and decode_key(tombstone[0][0]).topic == "other"  # type: ignore[union-attr]
    assert await coord.delete_offsets("missing", [("t", 0)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
    # A non-consumer group with members cannot delete offsets at all.
    await stable_group(coord, 1, group="connect", protocol_type="connect")
    await commit(coord, group="connect", generation=1,
                 member=coord.describe_group("connect").members[0].member_id, offsets=[OffsetCommit("x", 0, 1)])
    assert await coord.delete_offsets("connect", [("x", 0)]) == (ErrorCode.NON_EMPTY_GROUP, {})
    await coord.shutdown()


@async_test
async def test_deleting_all_offsets_of_an_empty_group_deletes_the_group() -> None:
    coord = await started()
    await commit(coord, group="s", offsets=[OffsetCommit("t", 0, 1)])
    assert await coord.delete_offsets("s", [("t", 0)]) == (ErrorCode.NONE, {("t", 0): ErrorCode.NONE})
    assert coord.describe_group("s").state == "Dead" and coord.list_groups(None, None) == []
    await coord.shutdown()


@async_test
async def test_delete_groups() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    await stable_group(coord, 1, group="busy")
    await commit(coord, group="idle", offsets=[OffsetCommit("t", 0, 1), OffsetCommit("t", 1, 1)])
    result = await coord.delete_groups(["busy", "idle", "ghost"])
    assert result == {"busy": ErrorCode.NON_EMPTY_GROUP, "idle": ErrorCode.NONE, "ghost": ErrorCode.GROUP_ID_NOT_FOUND}
    assert coord.fetch_offsets("idle", None) == (ErrorCode.NONE, {})
    assert {g.group_id for g in coord.list_groups(None, None)} == {"busy"}
    # Tombstones for both offsets and for the group itself.
    tombstones = store.batches[-1][1]
    assert len(tombstones) == 3 and all(v is None for _, v in tombstones)
    await coord.shutdown()


@async_test
async def test_retention_expires_offsets_of_empty_and_simple_groups() -> None:
    clock = [1_000_000]
    coord = await started(now_ms=lambda: clock[0], offsets_retention_minutes=1)
    (a,) = await stable_group(coord, 1, group="consumers", protocols=protos("t"))
    await commit(coord, group="consumers", generation=1, member=a.member_id,
                 offsets=[OffsetCommit("t", 0, 5), OffsetCommit("unsubscribed", 0, 5)])
    await commit(coord, group="simple", offsets=[OffsetCommit("t", 0, 5)])
    await commit(coord, group="explicit", retention=10_000, offsets=[OffsetCommit("t", 0, 5)])
    clock[0] += 30_000
    assert await coord.expire_offsets() == 1  # only "explicit" (10s retention) is due
    clock[0] += 31_000
    # Stable consumer group: only topics nobody subscribes to expire. Simple group: gone.
    assert await coord.expire_offsets() == 2
    assert set(coord.fetch_offsets("consumers", None)[1]) == {("t", 0)}
    assert "simple" not in coord.groups and "explicit" not in coord.groups
    # Once the group is Empty, retention counts from when it became Empty.
    await coord.leave_group(group_id="consumers", members=[LeaveMember(a.member_id)])
    await settle()
    clock[0] += 59_000
    assert await coord.expire_offsets() == 0
    clock[0] += 1_000
    assert await coord.expire_offsets() == 1
    assert coord.describe_group("consumers").state == "Dead"
    await coord.shutdown()


@async_test
async def test_retention_timer_runs_periodically() -> None:
    clock = [0]
    coord = await started(now_ms=lambda: clock[0], offsets_retention_minutes=1, offsets_retention_check_interval_ms=50)
    await commit(coord, group="simple", offsets=[OffsetCommit("t", 0, 5)])
    clock[0] += 120_000
    await asyncio.sleep(0.2)
    assert "simple" not in coord.groups
    await coord.shutdown()
