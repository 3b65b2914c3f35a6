"""Static membership (KIP-345, KIP-814) and heartbeat answers in every group state."""

from __future__ import annotations

import asyncio
from typing import Any

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_types import JoinResult, LeaveMember
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import (
    async_test,
    heartbeat,
    join,
    join_all,
    protos,
    settle,
    started,
    sync,
    task,
)


async def static_group(coord: GroupCoordinator, *instances: str, **kw: Any) -> list[JoinResult]:
    results = await join_all(*(join(coord, instance=i, client_id="cl", **kw) for i in instances))
    leader = next(r for r in results if r.leader == r.member_id)
    assignments = [(r.member_id, f"asg-{i}".encode()) for r, i in zip(results, instances, strict=True)]
    await asyncio.gather(*(sync(coord, r, instance=i, assignments=assignments if r is leader else None)
                           for r, i in zip(results, instances, strict=True)))
    return results


@async_test
async def test_static_member_ids_are_named_after_the_instance() -> None:
    coord = await started()
    (res,) = await static_group(coord, "inst-1")
    assert res.member_id.startswith("inst-1-")
    assert coord.describe_group("g").members[0].group_instance_id == "inst-1"
    await coord.shutdown()


@async_test
async def test_static_rejoin_replaces_member_without_rebalance_and_fences_old_id() -> None:
    coord = await started()
    a, b = await static_group(coord, "i-a", "i-b")
    follower, fi = (b, "i-b") if a.leader == a.member_id else (a, "i-a")
    # The follower restarts: it lost its member id but keeps its instance id.
    res = await join(coord, instance=fi, client_id="cl")
    assert res.error is ErrorCode.NONE and res.member_id != follower.member_id
    assert res.generation_id == 1 and res.members == []
    assert coord.describe_group("g").state == "Stable"  # no rebalance
    s = await sync(coord, res, instance=fi)
    assert s.error is ErrorCode.NONE and s.assignment == f"asg-{fi}".encode()  # keeps its assignment
    assert await heartbeat(coord, res.member_id, 1, instance=fi) is ErrorCode.NONE
    # The old incarnation is fenced everywhere.
    assert await heartbeat(coord, follower.member_id, 1, instance=fi) is ErrorCode.FENCED_INSTANCE_ID
    old_join = await join(coord, member_id=follower.member_id, instance=fi)
    assert old_join.error is ErrorCode.FENCED_INSTANCE_ID
    old_sync = await sync(coord, follower, instance=fi)
    assert old_sync.error is ErrorCode.FENCED_INSTANCE_ID
    commit = await coord.commit_offsets(group_id="g", generation_id=1, member_id=follower.member_id,
                                        group_instance_id=fi, retention_ms=-1, offsets=[])
    assert commit == {}
    await coord.shutdown()


@async_test
async def test_replaced_static_leader_without_kip814_is_told_the_old_leader() -> None:
    coord = await started()
    a, b = await static_group(coord, "i-a", "i-b")
    leader, li = (a, "i-a") if a.leader == a.member_id else (b, "i-b")
    res = await join(coord, instance=li)
    # Pre-v9 clients: report the old leader id so the new incarnation does not try to assign.
    assert res.leader == leader.member_id and res.member_id != leader.member_id
    assert res.members == [] and not res.skip_assignment
    await coord.shutdown()


@async_test
async def test_replaced_static_leader_with_kip814_leads_but_skips_assignment() -> None:
    coord = await started()
    a, b = await static_group(coord, "i-a", "i-b")
    li = "i-a" if a.leader == a.member_id else "i-b"
    res = await join(coord, instance=li, skip=True)
    assert res.leader == res.member_id and res.skip_assignment
    assert len(res.members) == 2
    assert coord.describe_group("g").state == "Stable"
    await coord.shutdown()


@async_test
async def test_static_rejoin_that_changes_the_selected_protocol_rebalances() -> None:
    coord = await started()
    meta = protos()[0][1]
    (a,) = await static_group(coord, "i-a")
    # The member now prefers roundrobin (still supporting range), so the selection changes.
    res = task(join(coord, instance="i-a", protocols=[("roundrobin", meta), ("range", meta)]))
    await settle()
    result = await res
    assert result.generation_id == 2 and result.protocol_name == "roundrobin"
    assert await heartbeat(coord, a.member_id, 1, instance="i-a") is ErrorCode.FENCED_INSTANCE_ID
    await coord.shutdown()


@async_test
async def test_static_member_that_does_not_rejoin_keeps_its_place_until_its_session_ends() -> None:
    coord = await started()
    a, b = await static_group(coord, "i-a", "i-b", session_ms=3000, rebalance_ms=200)
    # a rejoins with new metadata; b (static) does not rejoin within the rebalance timeout but is not
    # evicted by it (only dynamic members are); it stays a member of the new generation.
    res = await join(coord, member_id=a.member_id, instance="i-a", protocols=protos("other"), session_ms=3000,
                     rebalance_ms=200)
    assert res.generation_id == 2 and res.leader == a.member_id
    assert {m.member_id for m in res.members} == {a.member_id, b.member_id}
    assert {m.member_id for m in coord.describe_group("g").members} == {a.member_id, b.member_id}
    await coord.shutdown()


@async_test
async def test_leave_by_instance_id_alone() -> None:
    coord = await started()
    a, b = await static_group(coord, "i-a", "i-b")
    error, per = await coord.leave_group(group_id="g", members=[LeaveMember("", "i-a", "admin"),
                                                                LeaveMember("", "i-zzz")])
    assert error is ErrorCode.NONE
    assert [e for _, e in per] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert [m.group_instance_id for m in coord.describe_group("g").members] == ["i-b"]
    # A leave naming the wrong member id for an instance is fenced.
    error, per = await coord.leave_group(group_id="g", members=[LeaveMember("someone-else", "i-b")])
    assert per[0][1] is ErrorCode.FENCED_INSTANCE_ID
    await coord.shutdown()


@async_test
async def test_heartbeat_errors_in_each_state() -> None:
    coord = await started()
    assert await heartbeat(coord, "m", 0, group="none") is ErrorCode.UNKNOWN_MEMBER_ID
    a, b = await join_all(join(coord), join(coord))
    # CompletingRebalance: heartbeats are fine (members may heartbeat before SyncGroup).
    assert coord.describe_group("g").state == "CompletingRebalance"
    assert await heartbeat(coord, a.member_id, 1) is ErrorCode.NONE
    assert await heartbeat(coord, a.member_id, 0) is ErrorCode.ILLEGAL_GENERATION
    assert await heartbeat(coord, "stranger", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    leader = a if a.leader == a.member_id else b
    await asyncio.gather(sync(coord, a, assignments=[] if a is not leader else [(a.member_id, b"1")]),
                         sync(coord, b, assignments=[] if b is not leader else [(b.member_id, b"1")]))
    assert await heartbeat(coord, a.member_id, 1) is ErrorCode.NONE  # Stable
    assert await heartbeat(coord, a.member_id, 2) is ErrorCode.ILLEGAL_GENERATION
    assert await heartbeat(coord, a.member_id, 1, instance="i") is ErrorCode.UNKNOWN_MEMBER_ID
    newcomer = task(join(coord))
    await settle()
    assert await heartbeat(coord, b.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS  # PreparingRebalance
    await coord.leave_group(group_id="g", members=[LeaveMember(a.member_id), LeaveMember(b.member_id)])
    res = await newcomer
    await coord.leave_group(group_id="g", members=[LeaveMember(res.member_id)])
    await settle()
    assert coord.describe_group("g").state == "Empty"
    assert await heartbeat(coord, a.member_id, 2) is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()
