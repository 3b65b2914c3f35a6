"""Classic members inside a KIP-848 consumer group, and online upgrade / downgrade between the
protocols (group.consumer.migration.policy)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from grete.coordinator.groups.consumer_classic import decode_assignment, encode_assignment
from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat, HeartbeatResult
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_state import GroupState
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import LeaveMember
from grete.protocol.errors import ErrorCode
from grete.protocol.messages.consumer_protocol import ConsumerProtocolSubscription
from tests.coordinator._support import async_test, config, heartbeat, join, sync

T1 = uuid.uuid4()
VIEW = {"a": (T1, 4)}


def subscription(owned: list[int] | None = None) -> list[tuple[str, bytes]]:
    """A Java consumer's JoinGroup protocols: cooperative-sticky then range, v1 metadata with owned."""
    sub = ConsumerProtocolSubscription(topics=["a"], owned_partitions=[
        ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=owned or [])])
    meta = struct.pack(">h", 1) + sub.to_bytes(1)
    return [("cooperative-sticky", meta), ("range", meta)]


async def coordinator(**overrides: Any) -> GroupCoordinator:
    coord = GroupCoordinator(config(**overrides), InMemoryOffsetsStore(), topic_view=lambda: VIEW)
    await coord.start()
    return coord


async def hb(coord: GroupCoordinator, member: str, epoch: int = 0, owned: frozenset[Any] | None = None
             ) -> HeartbeatResult:
    return await coord.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id="g", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if epoch == 0 else -1, subscribed_topic_names=["a"] if epoch == 0 else None,
        subscribed_topic_regex=None, server_assignor=None,
        owned=frozenset() if epoch == 0 and owned is None else owned, client_id="c", client_host="/h"))


def partitions(assignment: bytes) -> set[int]:
    return {p for _, p in decode_assignment(assignment, VIEW)}


@async_test
async def test_a_classic_member_joins_a_consumer_group_and_gets_partitions_only_once_released() -> None:
    coord = await coordinator()
    a = await hb(coord, "A")
    assert a.assignment is not None and len(a.assignment) == 4
    joined = await join(coord, "g", protocols=subscription(), require_known=True)
    assert joined.error is ErrorCode.MEMBER_ID_REQUIRED
    joined = await join(coord, "g", joined.member_id, protocols=subscription())
    assert (joined.error, joined.leader, joined.protocol_name) == (ErrorCode.NONE, "", "cooperative-sticky")
    synced = await sync(coord, joined, "g")
    assert synced.error is ErrorCode.NONE and partitions(synced.assignment) == set()  # A still owns them all
    # A is told to revoke two partitions and confirms; the classic member is then told to rejoin.
    a2 = await hb(coord, "A", a.member_epoch)
    assert a2.assignment is not None and len(a2.assignment) == 2
    await hb(coord, "A", a2.member_epoch, owned=a2.assignment)
    assert await heartbeat(coord, joined.member_id, joined.generation_id) is ErrorCode.REBALANCE_IN_PROGRESS
    again = await join(coord, "g", joined.member_id, protocols=subscription())
    synced = await sync(coord, again, "g")
    assert synced.error is ErrorCode.NONE and len(partitions(synced.assignment)) == 2
    assert not partitions(synced.assignment) & {p for _, p in a2.assignment}
    assert await heartbeat(coord, again.member_id, again.generation_id) is ErrorCode.NONE
    assert await heartbeat(coord, again.member_id, again.generation_id - 1) is ErrorCode.ILLEGAL_GENERATION
    listed = coord.list_groups(None, None)
    assert [(g.group_type, g.state) for g in listed] == [("consumer", "Stable")]


@async_test
async def test_a_classic_group_upgrades_when_a_consumer_member_joins_and_downgrades_when_it_leaves() -> None:
    coord = await coordinator()
    first, second = await asyncio.gather(join(coord, "g", protocols=subscription()),
                                         join(coord, "g", protocols=subscription()))
    leader, follower = (first, second) if first.member_id == first.leader else (second, first)
    halves = {leader.member_id: frozenset({(T1, 0), (T1, 1)}), follower.member_id: frozenset({(T1, 2), (T1, 3)})}
    assignments = [(mid, encode_assignment(parts, VIEW, 1)) for mid, parts in halves.items()]
    synced = await asyncio.gather(sync(coord, leader, "g", assignments=assignments), sync(coord, follower, "g"))
    assert all(s.error is ErrorCode.NONE for s in synced)
    generation = leader.generation_id

    c = await hb(coord, "C")  # a consumer-protocol member: the group is upgraded in place
    group = coord.groups["g"]
    assert c.error is ErrorCode.NONE and group.consumer is not None and not group.members
    assert {mid: m.member_epoch for mid, m in group.consumer.members.items() if m.classic} == {
        leader.member_id: generation, follower.member_id: generation}
    assert c.assignment == frozenset()  # the classic members still own every partition
    assert await heartbeat(coord, leader.member_id, generation) is ErrorCode.REBALANCE_IN_PROGRESS

    # The classic members leave; C is the last member, with everything.
    error, _ = await coord.leave_group(group_id="g", members=[LeaveMember(leader.member_id),
                                                               LeaveMember(follower.member_id)])
    assert error is ErrorCode.NONE and list(group.consumer.members) == ["C"]
    c2 = await hb(coord, "C", c.member_epoch, owned=frozenset())
    assert c2.assignment is not None and len(c2.assignment) == 4

    # A classic member joins again; when C leaves, only classic members remain: back to classic.
    d = await join(coord, "g", protocols=subscription())
    assert d.error is ErrorCode.NONE
    await hb(coord, "C", -1)
    assert group.consumer is None and list(group.members) == [d.member_id]
    assert group.is_(GroupState.PREPARING_REBALANCE)
    assert await heartbeat(coord, d.member_id, d.generation_id) is ErrorCode.REBALANCE_IN_PROGRESS


@async_test
async def test_no_upgrade_when_the_policy_is_disabled() -> None:
    coord = await coordinator(consumer_migration_policy="disabled")
    joined = await join(coord, "g", protocols=subscription())
    await sync(coord, joined, "g", assignments=[(joined.member_id, b"")])
    refused = await hb(coord, "C")
    assert (refused.error, refused.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    assert coord.groups["g"].consumer is None and list(coord.groups["g"].members) == [joined.member_id]


@async_test
async def test_classic_members_of_a_consumer_group_survive_a_restart() -> None:
    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(config(), store, topic_view=lambda: VIEW)
    await coord.start()
    await hb(coord, "A")
    joined = await join(coord, "g", protocols=subscription())
    await coord.shutdown()
    again = GroupCoordinator(config(), store, topic_view=lambda: VIEW)
    await again.start()
    cg = again.groups["g"].consumer
    assert cg is not None
    classic = cg.members[joined.member_id].classic
    assert classic is not None and classic.protocols == tuple(subscription())
    assert classic.session_timeout_ms == 400
    await again.shutdown()
