"""Session timeouts, rebalance timeouts, pending-sync and pending-member expiry (real timers, small values)."""

from __future__ import annotations

import asyncio

from grete.protocol.errors import ErrorCode
from tests.coordinator._support import (
    async_test,
    heartbeat,
    join,
    join_all,
    settle,
    stable_group,
    started,
    sync,
    task,
)


@async_test
async def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    coord = await started()
    a, b = await stable_group(coord, 2, session_ms=600)
    # Keep a alive with heartbeats; b stays silent past its 600ms session timeout.
    for _ in range(12):
        await asyncio.sleep(0.1)
        code = await heartbeat(coord, a.member_id, 1)
        if code is not ErrorCode.NONE:
            break
    assert code is ErrorCode.REBALANCE_IN_PROGRESS
    assert [m.member_id for m in coord.describe_group("g").members] == [a.member_id]
    assert await heartbeat(coord, b.member_id, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    res = await join(coord, member_id=a.member_id)
    assert res.generation_id == 2 and [m.member_id for m in res.members] == [a.member_id]
    await coord.shutdown()


@async_test
async def test_heartbeats_keep_a_member_alive_beyond_its_session_timeout() -> None:
    coord = await started()
    (a,) = await stable_group(coord, 1)
    for _ in range(8):  # 800ms with a 400ms session
        await asyncio.sleep(0.1)
        assert await heartbeat(coord, a.member_id, 1) is ErrorCode.NONE
    assert coord.describe_group("g").state == "Stable"
    await coord.shutdown()


@async_test
async def test_last_member_expiring_empties_the_group() -> None:
    coord = await started()
    await stable_group(coord, 1)
    await asyncio.sleep(0.6)
    desc = coord.describe_group("g")
    assert desc.state == "Empty" and desc.members == []
    await coord.shutdown()


@async_test
async def test_rebalance_timeout_evicts_members_that_do_not_rejoin() -> None:
    coord = await started()
    a, b = await stable_group(coord, 2, session_ms=1000, rebalance_ms=250)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    # a rejoins (the leader or not, a rejoin with new metadata starts a rebalance); b never does,
    # and its 1s session outlasts the 250ms rebalance timeout.
    rejoin = task(join(coord, member_id=a.member_id, rebalance_ms=250, session_ms=1000,
                       protocols=[("range", b"new")]))
    await settle()
    assert await heartbeat(coord, b.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    res = await rejoin
    assert res.generation_id == 2 and [m.member_id for m in res.members] == [a.member_id]
    assert 0.2 <= loop.time() - t0 < 0.95  # the rebalance timeout (250ms), before b's session ends
    assert await heartbeat(coord, b.member_id, 2) is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()


@async_test
async def test_new_member_whose_join_never_completes_is_removed_after_the_new_member_timeout() -> None:
    coord = await started(new_member_join_timeout_ms=150)
    (a,) = await stable_group(coord, 1)
    newcomer = task(join(coord, rebalance_ms=5000))
    await settle()
    # The old member keeps heartbeating but does not rejoin: the rebalance (5s timeout) cannot end.
    await asyncio.sleep(0.1)
    assert await heartbeat(coord, a.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    res = await asyncio.wait_for(newcomer, 1)
    assert res.error is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()


@async_test
async def test_members_that_never_sync_are_evicted_after_the_rebalance_timeout() -> None:
    coord = await started()
    a, b = await join_all(join(coord, rebalance_ms=200), join(coord, rebalance_ms=200))
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    # Only the follower syncs; the leader vanishes. The follower is told to rejoin.
    parked = task(sync(coord, follower))
    res = await asyncio.wait_for(parked, 1)
    assert res.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert [m.member_id for m in coord.describe_group("g").members] == [follower.member_id]
    again = await join(coord, member_id=follower.member_id)
    assert again.leader == follower.member_id and again.generation_id == 2
    await coord.shutdown()


@async_test
async def test_pending_member_expires_after_its_session_timeout() -> None:
    coord = await started()
    (a,) = await stable_group(coord, 1)
    pending = await join(coord, require_known=True, session_ms=100)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    rejoin = task(join(coord, member_id=a.member_id))
    await settle()
    assert not rejoin.done()
    res = await asyncio.wait_for(rejoin, 1)  # released when the pending member expires (~100ms)
    assert res.generation_id == 2 and len(res.members) == 1
    late = await join(coord, member_id=pending.member_id)
    assert late.error is ErrorCode.UNKNOWN_MEMBER_ID
    await coord.shutdown()
