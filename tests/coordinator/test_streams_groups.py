"""KIP-1071 streams groups in the coordinator: the topology checked against the topics (statuses,
internal topics to create, partition counts), epochs, revoke-before-assign reconciliation of tasks,
leaving and fencing, refusals by the other protocols, member-epoch checks of commits, the interactive
queries map, and the records in __consumer_offsets surviving a restart."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import OffsetCommit
from grete.coordinator.groups.streams_records import decode_key
from grete.coordinator.groups.streams_requests import StreamsHeartbeat, StreamsResult
from grete.coordinator.groups.streams_state import MemberState, Tasks, assign_active
from grete.coordinator.groups.streams_topology import (
    ASSIGNMENT_DELAYED,
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    SHUTDOWN_APPLICATION,
    CopartitionGroup,
    Subtopology,
    TopicInfo,
    Topology,
    configure,
    java_hash_order,
)
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test, config, join

REPARTITION, CHANGELOG = "app-counts-repartition", "app-counts-changelog"
# Kafka Streams' word count: subtopology 0 reads "lines" and writes the repartition topic, which
# subtopology 1 reads, counting into a store with a changelog.
WORD_COUNT = Topology(1, (
    Subtopology("0", source_topics=("lines",), repartition_sink_topics=(REPARTITION,)),
    Subtopology("1", repartition_source_topics=(TopicInfo(REPARTITION, 0, 0, (("cleanup.policy", "delete"),)),),
                state_changelog_topics=(TopicInfo(CHANGELOG, 0, 0, (("cleanup.policy", "compact"),)),)),
))


ALL_TOPICS = {"lines": (uuid.uuid4(), 3), REPARTITION: (uuid.uuid4(), 3), CHANGELOG: (uuid.uuid4(), 3)}


async def coordinator(topics: dict[str, tuple[uuid.UUID, int]] | None = None,
                      store: InMemoryOffsetsStore | None = None, **overrides: Any) -> GroupCoordinator:
    seen = dict(ALL_TOPICS) if topics is None else topics  # the test may change it: the broker's view
    overrides.setdefault("streams_initial_rebalance_delay_ms", 0)
    coord = GroupCoordinator(config(**overrides), store or InMemoryOffsetsStore(), topic_view=lambda: seen)
    await coord.start()
    return coord


async def hb(coord: GroupCoordinator, member: str, epoch: int = 0, *, owned: Tasks | None = None,
             topology: Topology | None = None, endpoint_epoch: int = 0, instance: str | None = None,
             endpoint: tuple[str, int] | None = None, group: str = "app", standby: Tasks | None = None,
             process: str | None = None) -> StreamsResult:
    joining = epoch == 0
    return await coord.streams_group_heartbeat(StreamsHeartbeat(
        group_id=group, member_id=member, member_epoch=epoch, endpoint_information_epoch=endpoint_epoch,
        instance_id=instance, rebalance_timeout_ms=30000 if joining else -1,
        topology=(topology or WORD_COUNT) if joining else None,
        active_tasks=frozenset() if joining else owned, standby_tasks=frozenset() if joining else standby,
        warmup_tasks=frozenset() if joining else None,
        process_id=(process or f"process-{member}") if joining else None,
        user_endpoint=endpoint, client_id="c", client_host="/127.0.0.1"))


def tasks(result: StreamsResult) -> Tasks:
    assert result.active_tasks is not None, result
    return result.active_tasks


# ------------------------------------------------------------------------------------ topology

def test_topology_statuses_and_internal_topics_as_kafka_configures_them() -> None:
    missing = configure(WORD_COUNT, {})
    assert missing.statuses == ((MISSING_SOURCE_TOPICS, "Source topics lines are missing."),) and not missing.ready
    fresh = configure(WORD_COUNT, {"lines": (uuid.uuid4(), 4)})
    # The repartition topic takes the size of the topic written into it; the changelog one partition
    # per task of its subtopology; both are to be created, with the configs the topology asks for.
    [(code, detail)] = fresh.statuses
    assert code == MISSING_INTERNAL_TOPICS
    assert detail == f"Internal topics are missing: {', '.join(java_hash_order([REPARTITION, CHANGELOG]))}"
    assert fresh.to_create == (TopicInfo(REPARTITION, 4, 0, (("cleanup.policy", "delete"),)),
                               TopicInfo(CHANGELOG, 4, 0, (("cleanup.policy", "compact"),)))
    wrong = configure(WORD_COUNT, {"lines": (uuid.uuid4(), 4), REPARTITION: (uuid.uuid4(), 4),
                                   CHANGELOG: (uuid.uuid4(), 2)})
    assert wrong.statuses == ((INCORRECTLY_PARTITIONED_TOPICS, f"Existing topic {CHANGELOG} has different number "
                                                               "of partitions: expected 4, found 2"),)
    x, y = "cp-c06a78-x", "cp-c06a78-y"  # names and answer measured on Kafka 4.3.1
    copartitioned = Topology(1, (Subtopology("0", source_topics=(x, y), copartition_groups=(
        CopartitionGroup(source_topics=(0, 1)),)),))
    assert configure(copartitioned, {y: (uuid.uuid4(), 4), x: (uuid.uuid4(), 2)}).statuses == (
        (INCORRECTLY_PARTITIONED_TOPICS, f"Following topics do not have the same number of partitions: [{{{x}=2, {y}=4}}]"),)
    ready = configure(WORD_COUNT, {"lines": (uuid.uuid4(), 4), REPARTITION: (uuid.uuid4(), 4),
                                   CHANGELOG: (uuid.uuid4(), 4)})
    assert ready.ready and ready.tasks == {"0": 4, "1": 4} and ready.to_create == ()


def test_missing_internal_topics_are_listed_in_the_order_kafka_lists_them() -> None:
    # Details Kafka 4.3.1 answered (java.util.HashMap order), whatever order the names come in.
    for names, measured in ((["app-210ee5-counts-repartition", "app-210ee5-counts-changelog"],
                             ["app-210ee5-counts-repartition", "app-210ee5-counts-changelog"]),
                            (["fx-app-9a93eb", "cl-app-9a93eb"], ["fx-app-9a93eb", "cl-app-9a93eb"])):
        assert java_hash_order(names) == java_hash_order(names[::-1]) == measured
    assert java_hash_order(["app-ae5f50-counts-repartition", "app-ae5f50-counts-changelog"]) == [
        "app-ae5f50-counts-changelog", "app-ae5f50-counts-repartition"]  # String.hashCode buckets 7 and 11


def test_assignor_is_balanced_and_sticky() -> None:
    first = assign_active(["a", "b"], {"0": 3, "1": 3}, {})
    assert sorted(len(t) for t in first.values()) == [3, 3]
    assert first["a"] | first["b"] == {(s, p) for s in "01" for p in range(3)}
    third = assign_active(["a", "b", "c"], {"0": 3, "1": 3}, first)
    assert sorted(len(t) for t in third.values()) == [2, 2, 2]
    # a and b keep what they can; only the tasks c needs move.
    assert third["a"] <= first["a"] and third["b"] <= first["b"]
    assert assign_active(["a", "b", "c"], {"0": 1}, {"b": frozenset({("0", 0)})}) == {
        "a": frozenset(), "b": frozenset({("0", 0)}), "c": frozenset()}


# ---------------------------------------------------------------------------------- membership

@async_test
async def test_no_tasks_until_internal_topics_exist_then_all_to_the_first_member() -> None:
    topics = {"lines": (uuid.uuid4(), 2)}
    coord = await coordinator(topics)
    a = await hb(coord, "A")
    assert a.error is ErrorCode.NONE and a.member_epoch == 1 and tasks(a) == frozenset()
    assert a.statuses is not None and [code for code, _ in a.statuses] == [MISSING_INTERNAL_TOPICS]
    assert {t.name: t.partitions for t in a.to_create} == {REPARTITION: 2, CHANGELOG: 2}
    group = coord.groups["app"].streams
    assert group is not None and group.state_name() == "NotReady"
    topics.update({REPARTITION: (uuid.uuid4(), 2), CHANGELOG: (uuid.uuid4(), 2)})  # the broker created them
    a2 = await hb(coord, "A", 1, owned=frozenset())
    assert a2.member_epoch == 2 and a2.statuses == [] and a2.to_create == ()
    assert tasks(a2) == {("0", 0), ("0", 1), ("1", 0), ("1", 1)}
    assert group.state_name() == "Stable"


@async_test
async def test_second_member_gets_tasks_only_after_the_first_revoked_them() -> None:
    coord = await coordinator()
    a = await hb(coord, "A")
    everything = tasks(a)
    assert len(everything) == 6 and a.member_epoch == 1
    b = await hb(coord, "B")
    assert tasks(b) == frozenset() and b.member_epoch == 2  # A still owns everything
    a2 = await hb(coord, "A", 1, owned=everything)
    kept = tasks(a2)
    assert len(kept) == 3 and a2.member_epoch == 1  # told to revoke; its epoch waits
    group = coord.groups["app"].streams
    assert group is not None and group.members["A"].state is MemberState.UNREVOKED_TASKS
    assert group.state_name() == "Reconciling"
    b2 = await hb(coord, "B", 2, owned=frozenset())
    assert b2.active_tasks is None  # nothing released yet
    a3 = await hb(coord, "A", 1, owned=kept)
    assert a3.member_epoch == 2 and a3.active_tasks is None
    b3 = await hb(coord, "B", 2, owned=frozenset())
    assert tasks(b3) == everything - kept and group.state_name() == "Stable"
    # B leaves: A gets everything back at a new epoch.
    left = await hb(coord, "B", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    a4 = await hb(coord, "A", 2, owned=kept)
    assert tasks(a4) == everything and a4.member_epoch == 3


@async_test
async def test_epoch_errors_validation_and_topology_epochs() -> None:
    coord = await coordinator()
    assert (await hb(coord, "A")).member_epoch == 1
    greater = await hb(coord, "A", 7, owned=frozenset())
    assert greater.error is ErrorCode.FENCED_MEMBER_EPOCH
    unknown = await hb(coord, "Z", 1, owned=frozenset())
    assert (unknown.error, unknown.message) == (ErrorCode.UNKNOWN_MEMBER_ID, "Member Z is not a member of group app.")
    assert (await hb(coord, "", 0)).message == "MemberId can't be empty."
    no_topology = await coord.streams_group_heartbeat(StreamsHeartbeat(
        group_id="app", member_id="C", member_epoch=0, rebalance_timeout_ms=1000, active_tasks=frozenset(),
        standby_tasks=frozenset(), warmup_tasks=frozenset(), process_id="p"))
    assert (no_topology.error, no_topology.message) == (ErrorCode.INVALID_REQUEST,
                                                        "Topology must be non-null when (re-)joining.")
    # Kafka 4.3.1 takes no other topology than the group's, whatever its epoch.
    changed = Topology(1, WORD_COUNT.subtopologies[:1] + (Subtopology("1", source_topics=("lines",)),))
    newer = Topology(2, WORD_COUNT.subtopologies)
    for topology in (changed, newer):
        refused = await hb(coord, "C", topology=topology)
        assert (refused.error, refused.message) == (ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
        assert "C" not in coord.groups["app"].streams.members  # type: ignore[union-attr]
    empty = await hb(coord, "C", topology=Topology(1, (Subtopology("0"),)), group="other")
    assert (empty.error, empty.message) == (ErrorCode.STREAMS_INVALID_TOPOLOGY, "No source topics found for subtopology 0")
    regex = await hb(coord, "C", topology=Topology(1, (Subtopology("0", source_topic_regex=("l.*",)),)), group="other")
    assert (regex.error, regex.message) == (ErrorCode.INVALID_REQUEST,
                                            "Regular expressions for source topics are not supported yet.")
    orphan = await hb(coord, "C", topology=Topology(1, (Subtopology("0", repartition_source_topics=(TopicInfo("r"),)),)),
                      group="other")
    assert orphan.error is ErrorCode.STREAMS_INVALID_TOPOLOGY and orphan.message is not None
    assert orphan.message.endswith("because a repartition source topic is never used as a sink topic.")
    assert (await hb(coord, "A", -3)).message == "MemberEpoch is -3, but must be greater than or equal to -2."
    gone = await hb(coord, "A", 1, group="nobody")
    assert (gone.error, gone.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Streams group nobody not found.")


@async_test
async def test_other_protocols_refuse_a_streams_group() -> None:
    coord = await coordinator()
    await hb(coord, "A")
    consumer = await coord.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id="app", member_id="X", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=1000,
        subscribed_topic_names=["lines"], subscribed_topic_regex=None, server_assignor=None, owned=frozenset(),
        client_id="c", client_host="/h"))
    assert (consumer.error, consumer.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group app is not a consumer group.")
    classic = await join(coord, "app")
    assert classic.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    described = coord.describe_group("app")
    assert (described.found, described.not_found) == (False, "Group app is not a classic group.")
    assert [(g.group_id, g.group_type, g.state) for g in coord.list_groups(types={"streams"})] == [
        ("app", "streams", "Stable")]
    assert coord.list_groups(types={"consumer"}) == []
    # ... and a streams heartbeat refuses a consumer group.
    await coord.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id="cg", member_id="X", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=1000,
        subscribed_topic_names=["lines"], subscribed_topic_regex=None, server_assignor=None, owned=frozenset(),
        client_id="c", client_host="/h"))
    refused = await hb(coord, "A", group="cg")
    assert (refused.error, refused.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a streams group.")
    assert (await coord.delete_groups(["app"])) == {"app": ErrorCode.NON_EMPTY_GROUP}


@async_test
async def test_offset_commits_and_fetches_check_the_member_epoch() -> None:
    coord = await coordinator()
    a = await hb(coord, "A")

    async def commit(member: str, epoch: int) -> ErrorCode:
        result = await coord.commit_offsets(group_id="app", generation_id=epoch, member_id=member,
                                            group_instance_id=None, retention_ms=-1,
                                            offsets=[OffsetCommit("lines", 0, 5)])
        return result[("lines", 0)]

    assert await commit("A", a.member_epoch) is ErrorCode.NONE
    assert await commit("A", a.member_epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert await commit("Z", a.member_epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert await commit("", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # an admin commit needs an empty group
    txn = await coord.commit_txn_offsets(group_id="app", producer_id=1, producer_epoch=0, generation_id=9,
                                         member_id="A", group_instance_id=None, offsets=[OffsetCommit("lines", 1, 3)])
    assert txn == {("lines", 1): ErrorCode.ILLEGAL_GENERATION}
    assert coord.validate_offset_fetch("app", "A", a.member_epoch) is None
    assert coord.validate_offset_fetch("app", "A", 0) is ErrorCode.STALE_MEMBER_EPOCH
    _, offsets = coord.fetch_offsets("app", [("lines", 0)])
    assert offsets[("lines", 0)].offset == 5


@async_test
async def test_endpoints_map_the_partitions_of_each_members_active_tasks() -> None:
    coord = await coordinator()
    a = await hb(coord, "A", endpoint=("hostA", 7001))
    assert a.endpoints is not None and a.endpoint_epoch > 0
    [(endpoint, partitions, standby)] = a.endpoints
    assert endpoint == ("hostA", 7001)
    assert (partitions, standby) == ({"lines": [0, 1, 2], REPARTITION: [0, 1, 2]}, {})
    again = await hb(coord, "A", 1, owned=tasks(a), endpoint_epoch=a.endpoint_epoch)
    assert again.endpoints is None  # the member is up to date


@async_test
async def test_records_survive_a_restart_in_kafkas_record_types() -> None:
    store = InMemoryOffsetsStore()
    coord = await coordinator(store=store, streams_num_standby_replicas=1)
    a = await hb(coord, "A", endpoint=("hostA", 7001))
    b = await hb(coord, "B")
    a2 = await hb(coord, "A", 1, owned=tasks(a))
    await hb(coord, "A", 1, owned=tasks(a2))
    await coord.shutdown()
    written = {decode_key(k)[0] for p in store.partitions.values() for k, _ in p if decode_key(k) is not None}
    assert written == {17, 19, 20, 21, 22, 23}  # metadata, member, target metadata/member, current, topology
    again = await coordinator(store=store, streams_num_standby_replicas=1)
    before, after = coord.groups["app"].streams, again.groups["app"].streams
    assert before is not None and after is not None
    assert (after.group_epoch, after.assignment_epoch, after.topology) == (
        before.group_epoch, before.assignment_epoch, WORD_COUNT)
    def members(g: Any) -> dict[str, Any]:
        return {m: (x.member_epoch, x.assigned, x.pending_revocation, x.standby, x.state, x.user_endpoint, x.process_id)
                for m, x in g.members.items()}

    assert members(after) == members(before)
    assert any(x.standby for x in after.members.values())
    assert (after.target, after.target_standby, after.owners) == (before.target, before.target_standby, before.owners)
    # B continues where it was, at its epoch.
    resumed = await hb(again, "B", b.member_epoch, owned=frozenset())
    assert resumed.error is ErrorCode.NONE
    await again.shutdown()


@async_test
async def test_initial_rebalance_delay_holds_the_first_assignment() -> None:
    coord = await coordinator(streams_initial_rebalance_delay_ms=300)
    a = await hb(coord, "A")
    assert (a.member_epoch, tasks(a)) == (1, frozenset())
    assert a.statuses == [(ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay.")]
    b = await hb(coord, "B")  # within the delay: in the first assignment too
    assert tasks(b) == frozenset()
    await asyncio.sleep(0.4)
    a2 = await hb(coord, "A", a.member_epoch, owned=frozenset())
    b2 = await hb(coord, "B", b.member_epoch, owned=frozenset())
    assert a2.statuses == [] and len(tasks(a2)) == 3 and len(tasks(b2)) == 3


async def settle(coord: GroupCoordinator, names: list[str]) -> None:
    """Heartbeat every member, each reporting what it holds, until the group is Stable."""
    group = coord.groups["app"].streams
    assert group is not None
    for _ in range(10):
        if group.state_name() == "Stable":
            return
        for name in names:
            m = group.members[name]
            result = await hb(coord, name, m.member_epoch, owned=m.assigned, standby=m.standby)
            assert result.error is ErrorCode.NONE, result
    raise AssertionError(f"not stable: {group.state_name()}")


@async_test
async def test_standby_copies_go_to_other_processes_and_are_revoked_first() -> None:
    coord = await coordinator(streams_num_standby_replicas=1)
    a = await hb(coord, "A", endpoint=("hostA", 7001))
    assert len(tasks(a)) == 6 and a.standby_tasks == frozenset()  # no other process to hold a copy
    await hb(coord, "A2", process="process-A")  # another thread of A's process
    await hb(coord, "B")
    await settle(coord, ["A", "A2", "B"])
    group = coord.groups["app"].streams
    assert group is not None
    final = {m.member_id: (m.assigned, m.standby) for m in group.members.values()}
    assert sorted(len(active) for active, _ in final.values()) == [2, 2, 2]
    process_a = final["A"][0] | final["A2"][0]
    # Every task of the stateful subtopology ("1", the counts) has one copy, never in its own process:
    # B holds those A's process runs, A and A2 those B runs; the stateless subtopology "0" has none.
    stateful = {(s, p) for s, p in process_a | final["B"][0] if s == "1"}
    assert final["B"][1] == process_a & stateful
    assert final["A"][1] | final["A2"][1] == final["B"][0] & stateful
    assert not (final["A"][1] | final["A2"][1]) & process_a
    # The IQ map lists the standby partitions of each endpoint's member.
    behind = await hb(coord, "A", group.members["A"].member_epoch, owned=final["A"][0], standby=final["A"][1])
    assert behind.endpoints is not None
    [(_, _, standby_partitions)] = behind.endpoints
    copies = sorted(p for _, p in final["A"][1])  # all of subtopology "1", which reads the repartition topic
    assert standby_partitions == ({REPARTITION: copies} if copies else {})
    # Back to 0 replicas (a group config): B must first give its copies up, then it is Stable again.
    coord.ctx.group_overrides = lambda group_id: {"streams.num.standby.replicas": "0"}
    b = group.members["B"]
    revoke = await hb(coord, "B", b.member_epoch, owned=final["B"][0], standby=final["B"][1])
    assert revoke.standby_tasks == frozenset() and b.state is MemberState.UNREVOKED_TASKS
    assert revoke.member_epoch == b.member_epoch < group.assignment_epoch
    done = await hb(coord, "B", b.member_epoch, owned=final["B"][0], standby=frozenset())
    assert b.state is MemberState.STABLE and done.member_epoch == group.assignment_epoch


@async_test
async def test_a_silent_member_expires_and_a_shutdown_request_reaches_everyone() -> None:
    coord = await coordinator(streams_session_timeout_ms=300)
    a = await hb(coord, "A")
    b = await hb(coord, "B")
    await hb(coord, "A", a.member_epoch, owned=tasks(a))
    group = coord.groups["app"].streams
    assert group is not None and set(group.members) == {"A", "B"}
    for _ in range(4):  # B keeps heartbeating, A falls silent past its session timeout
        await asyncio.sleep(0.15)
        b = await hb(coord, "B", b.member_epoch, owned=group.members["B"].assigned)
    assert set(group.members) == {"B"}
    b = await hb(coord, "B", b.member_epoch, owned=group.members["B"].assigned)
    assert len(group.members["B"].assigned) == 6 and group.state_name() == "Stable"  # A's tasks moved to B
    shutdown = await coord.streams_group_heartbeat(StreamsHeartbeat(
        group_id="app", member_id="B", member_epoch=b.member_epoch, shutdown_application=True))
    assert shutdown.statuses is not None and [code for code, _ in shutdown.statuses] == [SHUTDOWN_APPLICATION]
    c = await hb(coord, "C")
    assert c.statuses is not None and SHUTDOWN_APPLICATION in [code for code, _ in c.statuses]


@async_test
async def test_an_empty_streams_group_is_deleted_with_its_records() -> None:
    store = InMemoryOffsetsStore()
    coord = await coordinator(store=store)
    a = await hb(coord, "A")
    await coord.commit_offsets(group_id="app", generation_id=a.member_epoch, member_id="A", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("lines", 0, 5)])
    assert (await hb(coord, "A", -1)).error is ErrorCode.NONE
    assert [(g.group_id, g.state) for g in coord.list_groups(types={"streams"})] == [("app", "Empty")]
    assert await coord.delete_groups(["app"]) == {"app": ErrorCode.NONE}
    assert coord.list_groups() == []
    await coord.shutdown()
    again = await coordinator(store=store)  # the tombstones keep it gone after a restart
    assert "app" not in again.groups
    await again.shutdown()


@async_test
async def test_a_static_member_comes_back_under_a_new_id_without_a_rebalance() -> None:
    coord = await coordinator()
    a = await hb(coord, "A", instance="i-1")
    await hb(coord, "B")
    await hb(coord, "A", a.member_epoch, owned=tasks(a), instance="i-1")
    group = coord.groups["app"].streams
    assert group is not None
    held = group.members["A"].assigned
    clash = await hb(coord, "Z", instance="i-1")  # the instance id is A's while A is there
    assert clash.error is ErrorCode.UNRELEASED_INSTANCE_ID
    epoch_before = group.group_epoch
    gone = await hb(coord, "A", -2, instance="i-1")
    assert gone.member_epoch == -2 and group.members["A"].assigned == held  # it keeps its tasks meanwhile
    back = await hb(coord, "A-new", instance="i-1", process="process-A")  # the same process, restarted
    assert back.error is ErrorCode.NONE and tasks(back) == held and "A" not in group.members
    assert group.group_epoch == epoch_before  # no rebalance for a returning static member
