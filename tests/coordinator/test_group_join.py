"""JoinGroup/SyncGroup/LeaveGroup: the rebalance protocol of classic groups."""

from __future__ import annotations

import asyncio
import re

from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import LeaveMember
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import (
    async_test,
    heartbeat,
    join,
    join_all,
    protos,
    settle,
    stable_group,
    started,
    subscription,
    sync,
    task,
)


@async_test
async def test_single_member_join_and_sync() -> None:
    coord = await started()
    res = await join(coord, client_id="app")
    assert res.error is ErrorCode.NONE
    assert re.fullmatch(r"app-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", res.member_id)
    assert res.leader == res.member_id and res.generation_id == 1
    assert (res.protocol_type, res.protocol_name) == ("consumer", "range")
    assert [m.member_id for m in res.members] == [res.member_id]
    assert res.members[0].metadata == subscription("t")
    assert coord.describe_group("g").state == "CompletingRebalance"
    s = await sync(coord, res, assignments=[(res.member_id, b"A")])
    assert (s.error, s.assignment, s.protocol_type, s.protocol_name) == (ErrorCode.NONE, b"A", "consumer", "range")
    desc = coord.describe_group("g")
    assert desc.state == "Stable" and desc.protocol == "range"
    assert [(m.metadata, m.assignment, m.client_id) for m in desc.members] == [(subscription("t"), b"A", "app")]
    await coord.shutdown()


@async_test
async def test_three_members_leader_gets_all_metadata_and_followers_wait_for_assignment() -> None:
    coord = await started()
    metas = [protos(f"topic{i}") for i in range(3)]
    results = await join_all(*(join(coord, protocols=m) for m in metas))
    assert {r.generation_id for r in results} == {1}
    leaders = [r for r in results if r.leader == r.member_id]
    assert len(leaders) == 1 and all(r.leader == leaders[0].member_id for r in results)
    leader = leaders[0]
    by_id = {m.member_id: m.metadata for m in leader.members}
    assert by_id == {r.member_id: metas[i][0][1] for i, r in enumerate(results)}
    assert all(r.members == [] for r in results if r is not leader)
    # Followers sync first: they stay parked until the leader's assignment arrives.
    followers = [task(sync(coord, r)) for r in results if r is not leader]
    await settle()
    assert not any(f.done() for f in followers)
    assignments = [(r.member_id, f"for-{r.member_id}".encode()) for r in results]
    lead_sync = await sync(coord, leader, assignments=assignments)
    assert lead_sync.assignment == f"for-{leader.member_id}".encode()
    for f, r in zip(followers, [r for r in results if r is not leader], strict=True):
        assert (await f).assignment == f"for-{r.member_id}".encode()
    assert coord.describe_group("g").state == "Stable"
    await coord.shutdown()


@async_test
async def test_members_left_out_of_the_assignment_get_empty_bytes() -> None:
    coord = await started()
    a, b = await join_all(join(coord), join(coord))
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    f = task(sync(coord, follower))
    await sync(coord, leader, assignments=[(leader.member_id, b"L"), ("stranger", b"X")])
    assert (await f).error is ErrorCode.NONE and (await f).assignment == b""
    await coord.shutdown()


@async_test
async def test_new_member_triggers_rebalance_and_everyone_rejoins() -> None:
    coord = await started()
    (first,) = await stable_group(coord, 1)
    joining = task(join(coord))
    await settle()
    assert coord.describe_group("g").state == "PreparingRebalance"
    assert await heartbeat(coord, first.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert not joining.done()  # waits for the existing member to rejoin
    rejoin = await join(coord, member_id=first.member_id)
    second = await joining
    assert rejoin.generation_id == second.generation_id == 2
    assert rejoin.leader == first.member_id  # the leader keeps leading when it rejoins
    assert len(rejoin.members) == 2
    await coord.shutdown()


@async_test
async def test_leave_triggers_rebalance_and_batch_leave_reports_per_member() -> None:
    coord = await started()
    a, b = await stable_group(coord, 2)
    error, per_member = await coord.leave_group(group_id="g", members=[
        LeaveMember(a.member_id, None, "shutting down"), LeaveMember("nobody")])
    assert error is ErrorCode.NONE
    assert [e for _, e in per_member] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert coord.describe_group("g").state == "PreparingRebalance"
    res = await join(coord, member_id=b.member_id)
    assert res.generation_id == 2 and res.leader == b.member_id and len(res.members) == 1
    await sync(coord, res)
    error, per_member = await coord.leave_group(group_id="g", members=[LeaveMember(b.member_id)])
    assert per_member[0][1] is ErrorCode.NONE
    await settle()
    desc = coord.describe_group("g")
    assert desc.state == "Empty" and desc.members == []
    await coord.shutdown()


@async_test
async def test_leave_unknown_group_answers_unknown_member_per_member() -> None:
    coord = await started()
    error, per_member = await coord.leave_group(group_id="nope", members=[LeaveMember("m")])
    assert error is ErrorCode.NONE and per_member[0][1] is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()


@async_test
async def test_member_id_required_flow() -> None:
    coord = await started()
    first = await join(coord, require_known=True, client_id="c1")
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("c1-") and first.generation_id == -1
    assert coord.describe_group("g").members == []  # pending, not a member yet
    res = await join(coord, member_id=first.member_id, require_known=True)
    assert res.error is ErrorCode.NONE and res.member_id == first.member_id == res.leader
    await coord.shutdown()


@async_test
async def test_pending_member_holds_the_rebalance_until_it_rejoins() -> None:
    coord = await started()
    (a,) = await stable_group(coord, 1)
    pending = await join(coord, require_known=True)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    rejoin = task(join(coord, member_id=a.member_id))  # leader rejoin starts a rebalance
    await settle()
    assert not rejoin.done()  # all members joined, but a pending member is outstanding
    new = await join(coord, member_id=pending.member_id)
    assert new.generation_id == (await rejoin).generation_id == 2
    await coord.shutdown()


@async_test
async def test_protocol_selected_by_votes() -> None:
    coord = await started()
    meta = subscription("t")
    results = await join_all(
        join(coord, protocols=[("range", meta), ("roundrobin", meta)]),
        join(coord, protocols=[("roundrobin", meta), ("range", meta), ("sticky", meta)]),
        join(coord, protocols=[("roundrobin", meta), ("range", meta)]),
    )
    assert {r.protocol_name for r in results} == {"roundrobin"}
    await coord.shutdown()


@async_test
async def test_inconsistent_protocols() -> None:
    coord = await started()
    await stable_group(coord, 1)
    assert (await join(coord, protocols=[("other", b"x")])).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(coord, protocol_type="connect")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # An empty group accepts any non-empty protocol type with at least one protocol.
    assert (await join(coord, "h", protocol_type="")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(coord, "h", protocols=[])).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    await coord.shutdown()


@async_test
async def test_sync_checks_protocol_echo_and_generation() -> None:
    coord = await started()
    res = await join(coord)
    bad_type = await coord.sync_group(group_id="g", generation_id=1, member_id=res.member_id, group_instance_id=None,
                                      protocol_type="connect", protocol_name=None, assignments=[])
    assert bad_type.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    bad_name = await coord.sync_group(group_id="g", generation_id=1, member_id=res.member_id, group_instance_id=None,
                                      protocol_type=None, protocol_name="roundrobin", assignments=[])
    assert bad_name.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    old = await coord.sync_group(group_id="g", generation_id=0, member_id=res.member_id, group_instance_id=None,
                                 protocol_type=None, protocol_name=None, assignments=[])
    assert old.error is ErrorCode.ILLEGAL_GENERATION
    stranger = await coord.sync_group(group_id="g", generation_id=1, member_id="x", group_instance_id=None,
                                      protocol_type=None, protocol_name=None, assignments=[])
    assert stranger.error is ErrorCode.UNKNOWN_MEMBER_ID
    unknown_group = await coord.sync_group(group_id="zz", generation_id=1, member_id="x", group_instance_id=None,
                                           protocol_type=None, protocol_name=None, assignments=[])
    assert unknown_group.error is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()


@async_test
async def test_parked_sync_gets_rebalance_in_progress_when_a_member_joins() -> None:
    coord = await started()
    a, b = await join_all(join(coord), join(coord))
    follower = b if a.leader == a.member_id else a
    parked = task(sync(coord, follower))
    await settle()
    newcomer = task(join(coord))
    assert (await parked).error is ErrorCode.REBALANCE_IN_PROGRESS
    newcomer.cancel()
    await coord.shutdown()


@async_test
async def test_validation_errors() -> None:
    coord = await started(group_max_session_timeout_ms=5000)
    assert (await join(coord, session_ms=5)).error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(coord, session_ms=5001)).error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(coord, group="")).error is ErrorCode.INVALID_GROUP_ID
    assert (await join(coord, member_id="ghost")).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert await heartbeat(coord, "m", 1, group="") is ErrorCode.INVALID_GROUP_ID
    await coord.shutdown()


@async_test
async def test_group_max_size() -> None:
    coord = await started(group_max_size=2)
    await stable_group(coord, 2)
    third = await join(coord)
    assert third.error is ErrorCode.GROUP_MAX_SIZE_REACHED and third.member_id == ""
    await coord.shutdown()


@async_test
async def test_not_available_before_start_and_after_shutdown() -> None:
    coord = await started()
    await coord.shutdown()
    assert (await join(coord)).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert coord.fetch_offsets("g", None)[0] is ErrorCode.COORDINATOR_NOT_AVAILABLE


@async_test
async def test_shutdown_answers_parked_joins() -> None:
    coord = await started(group_initial_rebalance_delay_ms=10_000)
    parked = task(join(coord, rebalance_ms=20_000))
    await settle()
    await coord.shutdown()
    assert (await parked).error is ErrorCode.NOT_COORDINATOR


@async_test
async def test_initial_rebalance_delay_extends_while_members_arrive() -> None:
    coord = await started(group_initial_rebalance_delay_ms=300)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    first = task(join(coord, rebalance_ms=5000))
    await asyncio.sleep(0.05)
    second = task(join(coord, rebalance_ms=5000))  # arrives inside the first delay: one more delay
    a, b = await first, await second
    elapsed = loop.time() - t0
    assert a.generation_id == b.generation_id == 1
    assert 0.55 <= elapsed < 2.0, elapsed  # two delays, well short of the 5s rebalance timeout
    await coord.shutdown()


@async_test
async def test_initial_delay_extensions_stop_at_the_rebalance_timeout() -> None:
    coord = await started(group_initial_rebalance_delay_ms=100)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    first = task(join(coord, rebalance_ms=250))
    stream = []
    for _ in range(20):  # a member every 60ms for 1.2s would extend the delay all along
        await asyncio.sleep(0.06)
        if first.done():
            break
        stream.append(task(join(coord, rebalance_ms=250)))
    res = await first
    assert res.generation_id == 1
    assert 0.24 <= loop.time() - t0 < 0.9  # capped at the 250ms rebalance timeout
    await coord.shutdown()
    await asyncio.gather(*stream)


@async_test
async def test_leader_disconnecting_mid_sync_still_delivers_the_assignment() -> None:
    store = InMemoryOffsetsStore()
    coord = await started(store)
    a, b = await join_all(join(coord), join(coord))
    store.append_delay_s = 0.05
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    parked = task(sync(coord, follower))
    await settle()
    lead = task(sync(coord, leader, assignments=[(follower.member_id, b"F")]))
    await asyncio.sleep(0.01)
    lead.cancel()  # the leader's connection dropped while its assignment was being written
    assert (await parked).assignment == b"F"
    assert coord.describe_group("g").state == "Stable"
    await coord.shutdown()


@async_test
async def test_the_leader_is_answered_before_a_member_that_synced_behind_it() -> None:
    """The leader's SyncGroup starts the assignment's write; a member that syncs while it is written
    is parked and answered with the others. Every member is answered in the same step, the leader
    first, as Kafka completes them when the write does: a leader that asked first learns its new
    assignment no later than a member that asked after it."""
    store = InMemoryOffsetsStore()
    coord = await started(store)
    a, b = await join_all(join(coord), join(coord))
    store.append_delay_s = 0.05
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    answered: list[str] = []
    lead = task(sync(coord, leader, assignments=[(leader.member_id, b"L"), (follower.member_id, b"F")]))
    lead.add_done_callback(lambda _t: answered.append("leader"))
    await asyncio.sleep(0.01)  # the write is under way
    behind = task(sync(coord, follower))
    behind.add_done_callback(lambda _t: answered.append("follower"))
    assert ((await lead).assignment, (await behind).assignment) == (b"L", b"F")
    await settle()  # the done callbacks
    assert answered == ["leader", "follower"]
    await coord.shutdown()
