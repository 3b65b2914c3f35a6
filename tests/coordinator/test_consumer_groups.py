"""KIP-848 consumer groups in the coordinator: epochs, reconciliation (revoke before assign), static
members, timers, assignors, and the member-epoch checks of offset commits and fetches."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from grete.coordinator.groups.consumer_assignors import AssignorMember, assign
from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat, HeartbeatResult
from grete.coordinator.groups.consumer_state import MemberState
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import OffsetCommit
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test, config, join, sync

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS: dict[str, tuple[uuid.UUID, int]] = {"a": (T1, 6), "b": (T2, 2)}


async def coordinator(topics: dict[str, tuple[uuid.UUID, int]] | None = None, **overrides: Any) -> GroupCoordinator:
    view = dict(TOPICS if topics is None else topics)
    coord = GroupCoordinator(config(**overrides), InMemoryOffsetsStore(), topic_view=lambda: view)
    await coord.start()
    return coord


async def hb(coord: GroupCoordinator, member: str, epoch: int = 0, *, group: str = "g", topics: list[str] | None = None,
       regex: str | None = None, owned: frozenset[tuple[uuid.UUID, int]] | None = None, instance: str | None = None,
       assignor: str | None = None, rebalance_ms: int = -1) -> HeartbeatResult:
    if epoch == 0:
        owned = frozenset() if owned is None else owned
        rebalance_ms = 30000 if rebalance_ms == -1 else rebalance_ms
        topics = ["a"] if topics is None and regex is None else topics
    return await coord.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=regex,
        server_assignor=assignor, owned=owned, client_id="c", client_host="/127.0.0.1"))


def parts(result: HeartbeatResult) -> set[int]:
    assert result.assignment is not None
    return {p for _, p in result.assignment}


@async_test
async def test_first_member_gets_everything_then_revokes_before_the_second_gets_any() -> None:
    coord = await coordinator()
    a = await hb(coord, "A")
    assert (a.error, a.member_epoch, parts(a)) == (ErrorCode.NONE, 2, set(range(6)))  # a new group is at 1
    b = await hb(coord, "B")
    assert b.error is ErrorCode.NONE and parts(b) == set()  # A still owns everything
    a2 = await hb(coord, "A", 2)
    # A is told its smaller assignment but keeps its epoch until it confirms the revocation.
    assert a2.member_epoch == 2 and len(parts(a2)) == 3
    assert coord.groups["g"].consumer is not None
    assert coord.groups["g"].consumer.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    b2 = await hb(coord, "B", b.member_epoch)
    assert b2.assignment is None  # nothing released yet: B may not take A's partitions
    kept = frozenset((T1, p) for p in parts(a2))
    a3 = await hb(coord, "A", 2, owned=kept)
    assert a3.member_epoch == 3
    b3 = await hb(coord, "B", b.member_epoch, owned=frozenset())
    assert b3.member_epoch == 3 and parts(b3) == set(range(6)) - parts(a2)


@async_test
async def test_epoch_errors_and_request_validation_as_kafka_answers() -> None:
    coord = await coordinator()
    assert (await hb(coord, "A")).member_epoch == 2
    greater = await hb(coord, "A", 5)
    assert greater.error is ErrorCode.FENCED_MEMBER_EPOCH
    assert greater.message == ("The consumer group member has a greater member epoch (5) than the one known by the "
                               "group coordinator (2). The member must abandon all its partitions and rejoin.")
    unknown = await hb(coord, "Z", 1)
    assert (unknown.error, unknown.message) == (ErrorCode.UNKNOWN_MEMBER_ID, "Member Z is not a member of group g.")
    assert (await hb(coord, "", 0)).message == "MemberId can't be empty."
    assert (await hb(coord, "B", -3)).message == "MemberEpoch is invalid."
    assert (await hb(coord, "B", -2)).message == "InstanceId can't be null."
    assert (await hb(coord, "B", 0, owned=frozenset({(T1, 0)}))).message == "TopicPartitions must be empty when (re-)joining."
    bad = await hb(coord, "B", assignor="foo")
    assert (bad.error, bad.message) == (ErrorCode.UNSUPPORTED_ASSIGNOR,
                                        "ServerAssignor foo is not supported. Supported assignors: uniform, range.")
    assert (await hb(coord, "B", topics=None, regex="[")).error is ErrorCode.INVALID_REGULAR_EXPRESSION


@async_test
async def test_lost_answer_previous_epoch_is_accepted_if_it_owns_no_more_than_assigned() -> None:
    coord = await coordinator()
    await hb(coord, "A")
    b = await hb(coord, "B")
    a = await hb(coord, "A", 2)
    await hb(coord, "A", 2, owned=frozenset((T1, p) for p in parts(a)))  # A moves to epoch 3
    again = await hb(coord, "A", 2, owned=frozenset((T1, p) for p in parts(a)))
    assert again.error is ErrorCode.NONE and again.member_epoch == 3
    assert (await hb(coord, "A", 2, owned=frozenset((T1, p) for p in range(6)))).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert b.error is ErrorCode.NONE


@async_test
async def test_leave_frees_partitions_and_static_members_come_back_without_a_rebalance() -> None:
    coord = await coordinator()
    s1 = await hb(coord, "S1", instance="i1")
    assert parts(s1) == set(range(6))
    taken = await hb(coord, "S2", instance="i1")
    assert taken.error is ErrorCode.UNRELEASED_INSTANCE_ID
    assert (await hb(coord, "S2", 1, instance="i1")).error is ErrorCode.FENCED_INSTANCE_ID
    assert (await hb(coord, "S2", 1, instance="i9")).error is ErrorCode.UNKNOWN_MEMBER_ID
    left = await hb(coord, "S1", -2, instance="i1")
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -2)
    cg = coord.groups["g"].consumer
    assert cg is not None
    epoch = cg.group_epoch
    back = await hb(coord, "S2", instance="i1")
    assert back.error is ErrorCode.NONE and parts(back) == set(range(6)) and cg.group_epoch == epoch
    assert list(cg.members) == ["S2"]
    gone = await hb(coord, "S2", -1, instance="i1")
    assert gone.member_epoch == -1 and not cg.members and cg.group_epoch == epoch + 1
    assert (await hb(coord, "S2", -1)).error is ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_session_timeout_removes_a_silent_member_and_its_partitions_move() -> None:
    coord = await coordinator(consumer_session_timeout_ms=50)
    await hb(coord, "A")
    await hb(coord, "B")
    await asyncio.sleep(0.2)  # neither heartbeats again: both sessions end
    cg = coord.groups["g"].consumer
    assert cg is not None and not cg.members and not cg.owners
    assert (await hb(coord, "A", 1)).error is ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_regex_matches_whole_names_and_new_topics_join_the_assignment() -> None:
    view = {"orders-1": (T1, 2), "orders-1x": (T2, 1), "xorders-1": (uuid.uuid4(), 1)}
    coord = GroupCoordinator(config(), InMemoryOffsetsStore(), topic_view=lambda: view)
    await coord.start()
    a = await hb(coord, "A", topics=None, regex="orders-\\d")
    assert a.assignment == frozenset({(T1, 0), (T1, 1)})
    t3 = uuid.uuid4()
    view["orders-2"] = (t3, 1)
    a2 = await hb(coord, "A", a.member_epoch, owned=a.assignment)
    assert a2.member_epoch == a.member_epoch + 1 and a2.assignment == frozenset({(T1, 0), (T1, 1), (t3, 0)})


@async_test
async def test_max_size_and_a_classic_join_refused_while_the_group_has_consumer_members() -> None:
    coord = await coordinator(consumer_max_size=1, consumer_migration_policy="disabled")
    await hb(coord, "A")
    full = await hb(coord, "B")
    assert (full.error, full.message) == (ErrorCode.GROUP_MAX_SIZE_REACHED,
                                          "The consumer group has reached its maximum capacity of 1 members.")
    assert (await join(coord, "g")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    listed = coord.list_groups(None, {"consumer"})
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [("g", "consumer", "Stable")]
    assert coord.list_groups(None, {"classic"}) == []
    assert coord.describe_group("g").found is False


@async_test
async def test_offset_commits_need_the_members_current_epoch() -> None:
    coord = await coordinator()
    a = await hb(coord, "A")
    commit = [OffsetCommit("a", 0, 10)]

    async def commit_as(member: str, epoch: int, version: int = 9) -> ErrorCode:
        result = await coord.commit_offsets(group_id="g", generation_id=epoch, member_id=member,
                                            group_instance_id=None, retention_ms=-1, offsets=commit,
                                            api_version=version)
        return result[("a", 0)]

    assert await commit_as("A", a.member_epoch) is ErrorCode.NONE
    assert await commit_as("A", a.member_epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert await commit_as("A", a.member_epoch, version=8) is ErrorCode.UNSUPPORTED_VERSION
    assert await commit_as("Z", a.member_epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert await commit_as("", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # admin commits only when empty
    assert coord.validate_offset_fetch("g", "A", a.member_epoch) is None
    assert coord.validate_offset_fetch("g", "A", 0) is ErrorCode.STALE_MEMBER_EPOCH
    assert coord.validate_offset_fetch("g", None, -1) is None
    await hb(coord, "A", -1)
    assert await commit_as("", -1) is ErrorCode.NONE
    assert coord.fetch_offsets("g", None)[1][("a", 0)].offset == 10


def test_uniform_is_balanced_and_sticky_range_is_contiguous() -> None:
    topics = {"a": (T1, 7)}
    first = assign("uniform", [AssignorMember(m, frozenset({"a"}), frozenset()) for m in "XY"], topics)
    assert sorted(len(v) for v in first.values()) == [3, 4]
    members = [AssignorMember(m, frozenset({"a"}), first.get(m, frozenset())) for m in "XYZ"]
    second = assign("uniform", members, topics)
    assert sorted(len(v) for v in second.values()) == [2, 2, 3]
    assert second["X"] <= first["X"] and second["Y"] <= first["Y"]  # nobody trades partitions needlessly
    ranged = assign("range", [AssignorMember(m, frozenset({"a"}), frozenset()) for m in "XYZ"], topics)
    assert [sorted(p for _, p in ranged[m]) for m in "XYZ"] == [[0, 1, 2], [3, 4], [5, 6]]


def test_uniform_gives_each_partition_only_to_members_subscribed_to_its_topic() -> None:
    members = [AssignorMember("X", frozenset({"a"}), frozenset()),
               AssignorMember("Y", frozenset({"a", "b"}), frozenset())]
    result = assign("uniform", members, TOPICS)
    assert all(tid == T1 for tid, _ in result["X"])
    assert len(result["X"] | result["Y"]) == 8 and not result["X"] & result["Y"]
    assert abs(len(result["X"]) - len(result["Y"])) <= 1


@async_test
async def test_a_consumer_group_survives_a_restart_from_its_records() -> None:
    store = InMemoryOffsetsStore()
    view = dict(TOPICS)
    coord = GroupCoordinator(config(), store, topic_view=lambda: view)
    await coord.start()
    await hb(coord, "A", instance="ia")
    b = await hb(coord, "B", topics=["a", "b"])
    a = await hb(coord, "A", 2, instance="ia")  # told to revoke: UNREVOKED_PARTITIONS is stored too
    await hb(coord, "C")
    await hb(coord, "C", -1)  # left: its records are tombstoned
    before = coord.groups["g"].consumer
    assert before is not None
    await coord.shutdown()
    store.compact()

    again = GroupCoordinator(config(), store, topic_view=lambda: view)
    await again.start()
    after = again.groups["g"].consumer
    assert after is not None
    assert (after.group_epoch, after.assignment_epoch, after.target) == (before.group_epoch, before.assignment_epoch,
                                                                          before.target)
    assert set(after.members) == {"A", "B"} and after.static_members == {"ia": "A"}
    for mid in ("A", "B"):
        old, new = before.members[mid], after.members[mid]
        assert (new.member_epoch, new.previous_member_epoch, new.state, new.assigned, new.pending_revocation,
                new.subscribed_topic_names, new.instance_id, new.rebalance_timeout_ms) == (
            old.member_epoch, old.previous_member_epoch, old.state, old.assigned, old.pending_revocation,
            old.subscribed_topic_names, old.instance_id, old.rebalance_timeout_ms)
    assert after.owners == before.owners
    # The members carry on from where they were (no rejoin) until everything is assigned once.
    assert a.assignment is not None and b.assignment is not None
    state = {"A": (a.member_epoch, a.assignment, "ia"), "B": (b.member_epoch, b.assignment, None)}
    for _ in range(4):
        for mid, (epoch, owned, instance) in list(state.items()):
            r = await hb(again, mid, epoch, owned=owned, instance=instance)
            assert r.error is ErrorCode.NONE, r
            state[mid] = (r.member_epoch, owned if r.assignment is None else r.assignment, instance)
    assert {e for e, _, _ in state.values()} == {after.assignment_epoch}
    assert sorted(state["A"][1] | state["B"][1]) == sorted(
        [(T1, p) for p in range(6)] + [(T2, p) for p in range(2)])
    assert not state["A"][1] & state["B"][1]
    await again.shutdown()


@async_test
async def test_deleting_an_empty_consumer_group_tombstones_its_records() -> None:
    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(config(), store, topic_view=lambda: dict(TOPICS))
    await coord.start()
    await hb(coord, "A")
    assert await coord.delete_groups(["g"]) == {"g": ErrorCode.NON_EMPTY_GROUP}
    await hb(coord, "A", -1)
    assert await coord.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    store.compact()
    assert not [r for records in store.partitions.values() for r in records]


@async_test
async def test_an_empty_group_changes_type_and_a_restart_keeps_the_new_type() -> None:
    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(config(), store, topic_view=lambda: dict(TOPICS))
    await coord.start()
    await hb(coord, "A")
    await hb(coord, "A", -1)
    joined = await join(coord, "g")  # the consumer group is empty: a classic member may take it over
    assert joined.error is ErrorCode.NONE and coord.groups["g"].consumer is None
    synced = await sync(coord, joined, "g", assignments=[(joined.member_id, b"")])
    assert synced.error is ErrorCode.NONE  # the classic group's record is written
    await asyncio.sleep(0.05)  # the consumer group's tombstones are written in the background
    await coord.shutdown()
    store.compact()
    kinds = {int.from_bytes(k[:2], "big") for records in store.partitions.values() for k, _ in records}
    assert kinds == {2}  # the classic group's record only: no consumer-group record is left
    again = GroupCoordinator(config(), store, topic_view=lambda: dict(TOPICS))
    await again.start()
    assert again.groups["g"].consumer is None and list(again.groups["g"].members) == [joined.member_id]
    await again.shutdown()


@async_test
async def test_a_failed_write_answers_with_kafkas_mapping_of_the_logs_error() -> None:
    from grete.protocol.errors import KafkaError

    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(config(), store, topic_view=lambda: dict(TOPICS))
    await coord.start()
    store.fail_with = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert (await hb(coord, "A")).error is ErrorCode.NOT_COORDINATOR
    store.fail_with = KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr")
    assert (await hb(coord, "B")).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    await coord.shutdown()


@async_test
async def test_a_groups_own_configs_set_its_heartbeat_interval_and_session_timeout() -> None:
    overrides = {"g": {"consumer.heartbeat.interval.ms": "7000", "consumer.session.timeout.ms": "50"}}
    coord = GroupCoordinator(config(), InMemoryOffsetsStore(), topic_view=lambda: dict(TOPICS),
                             group_overrides=lambda group_id: overrides.get(group_id, {}))
    await coord.start()
    assert (await hb(coord, "A")).heartbeat_interval_ms == 7000
    assert (await hb(coord, "A", group="other")).heartbeat_interval_ms == 5000
    await asyncio.sleep(0.2)  # group g's 50 ms session ends; the other group's 45 s one does not
    assert not coord.groups["g"].consumer.members  # type: ignore[union-attr]
    assert list(coord.groups["other"].consumer.members) == ["A"]  # type: ignore[union-attr]
    await coord.shutdown()
