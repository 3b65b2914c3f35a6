"""Streams groups (KIP-1071) on the wire, the same requests against grete and Kafka 4.3.1: ApiVersions,
StreamsGroupHeartbeat's request checks and their messages, the first join (initial rebalance delay,
MISSING_INTERNAL_TOPICS, the internal topics then created by the broker with the topology's configs),
tasks and the interactive-queries map after the delay, StreamsGroupDescribe, fencing, topology
updates refused, and how ConsumerGroupHeartbeat, JoinGroup, DescribeGroups, ListGroups and
OffsetCommit treat a streams group."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from tools.kafka_admin import call  # noqa: E402

Q = StreamsGroupHeartbeatRequest
DELAYED = (5, "Assignment delayed due to the configured initial rebalance delay.")
NOT_READY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


@pytest.fixture
def app(request: pytest.FixtureRequest, target: str) -> tuple[str, str]:
    if target == "kafka-3.9":
        pytest.skip("Kafka 3.9 has no streams groups")  # before its broker is started
    broker = request.getfixturevalue("broker")
    topic, app_id = f"in-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    call(broker.bootstrap, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=3, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000), 5)
    # Kafka answers NOT_COORDINATOR until __consumer_offsets exists and its partition is loaded.
    call(broker.bootstrap, FindCoordinatorRequest(key=app_id, key_type=0), 3)
    deadline = time.monotonic() + 30
    describe = StreamsGroupDescribeRequest(group_ids=[app_id], include_authorized_operations=False)
    while call(broker.bootstrap, describe, 0).groups[0].error_code in NOT_READY:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)
    return topic, app_id


def word_count(topic: str, app_id: str) -> Any:
    info = Q.TopicInfo
    return Q.Topology(epoch=0, subtopologies=[
        Q.Subtopology(subtopology_id="0", source_topics=[topic], source_topic_regex=[], state_changelog_topics=[],
                      repartition_sink_topics=[f"{app_id}-counts-repartition"], repartition_source_topics=[],
                      copartition_groups=[]),
        Q.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[], repartition_sink_topics=[],
                      state_changelog_topics=[info(name=f"{app_id}-counts-changelog", partitions=0, replication_factor=0,
                                                   topic_configs=[Q.KeyValue(key="cleanup.policy", value="compact")])],
                      repartition_source_topics=[info(name=f"{app_id}-counts-repartition", partitions=0,
                                                      replication_factor=0, topic_configs=[
                                                          Q.KeyValue(key="cleanup.policy", value="delete")])],
                      copartition_groups=[])])


def heartbeat(bootstrap: str, app_id: str, member: str, epoch: int, topology: Any = None, **fields: Any) -> Any:
    joining = epoch == 0
    request = dict(group_id=app_id, member_id=member, member_epoch=epoch, endpoint_information_epoch=0,
                   rebalance_timeout_ms=30000 if joining else -1, topology=topology,
                   active_tasks=[] if joining else None, standby_tasks=[] if joining else None,
                   warmup_tasks=[] if joining else None, process_id="p1" if joining else None)
    request.update(fields)
    return call(bootstrap, Q(**request), 0)


def statuses(response: Any) -> list[tuple[int, str]]:
    return [(s.status_code, s.status_detail) for s in response.status]


def test_streams_group_apis_as_kafka_answers_them(app: tuple[str, str], broker: Any) -> None:
    topic, app_id = app
    bs = broker.bootstrap
    versions = call(bs, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys if k.api_key in (88, 89)} == {
        (88, 0, 0), (89, 0, 0)}
    topology = word_count(topic, app_id)

    # Request checks, each with Kafka's code and message (and an empty status list).
    for fields, message in (({"member_id": ""}, "MemberId can't be empty."),
                            ({"topology": None}, "Topology must be non-null when (re-)joining."),
                            ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
                            ({"active_tasks": None}, "ActiveTasks must be empty when (re-)joining.")):
        bad = heartbeat(bs, app_id, "m1", 0, **{"topology": topology, **fields})
        assert (bad.error_code, bad.error_message, bad.status) == (ErrorCode.INVALID_REQUEST, message, [])
    bad_epoch = heartbeat(bs, app_id, "m1", -3)
    assert bad_epoch.error_message == "MemberEpoch is -3, but must be greater than or equal to -2."
    nobody = heartbeat(bs, app_id, "zz", 1)
    assert (nobody.error_code, nobody.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                         f"Streams group {app_id} not found.")

    # The first join: no tasks yet, the delay and the missing internal topics reported.
    joined = heartbeat(bs, app_id, "m1", 0, topology, user_endpoint=Q.Endpoint(host="h1", port=7001))
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m1", 1)
    assert (joined.heartbeat_interval_ms, joined.acceptable_recovery_lag, joined.task_offset_interval_ms) == (
        5000, 0, 0)
    assert (joined.active_tasks, joined.standby_tasks, joined.warmup_tasks) == ([], [], [])
    assert statuses(joined)[0] == DELAYED
    code, detail = statuses(joined)[1]
    assert code == 3 and detail.startswith("Internal topics are missing: ")
    assert set(detail.split(": ")[1].split(", ")) == {f"{app_id}-counts-repartition", f"{app_id}-counts-changelog"}
    fenced = heartbeat(bs, app_id, "m1", 99)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert fenced.error_message == ("The streams group member has a greater member epoch (99) than the one known by "
                                    "the group coordinator (1). The member must abandon all its partitions and rejoin.")
    changed = word_count(topic, app_id)
    changed.epoch = 1
    refused = heartbeat(bs, app_id, "m2", 0, changed)
    assert (refused.error_code, refused.error_message) == (ErrorCode.INVALID_REQUEST,
                                                           "Topology updates are not supported yet.")

    # After the delay (3 s by default), with the internal topics created: every task, and the
    # partitions of the input topics for interactive queries.
    time.sleep(3.5)
    deadline, epoch = time.monotonic() + 20, joined.member_epoch
    while True:
        beat = heartbeat(bs, app_id, "m1", epoch)
        assert beat.error_code == 0, beat.error_message
        epoch = beat.member_epoch
        if beat.active_tasks:
            break
        assert time.monotonic() < deadline, statuses(beat)
        time.sleep(0.5)
    assert statuses(beat) == []
    assert [(t.subtopology_id, t.partitions) for t in beat.active_tasks] == [("0", [0, 1, 2]), ("1", [0, 1, 2])]
    [endpoint] = beat.partitions_by_user_endpoint
    assert (endpoint.user_endpoint.host, endpoint.user_endpoint.port) == ("h1", 7001)
    assert {(tp.topic, tuple(tp.partitions)) for tp in endpoint.active_partitions} == {
        (topic, (0, 1, 2)), (f"{app_id}-counts-repartition", (0, 1, 2))}
    configs = call(bs, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=f"{app_id}-counts-changelog", configuration_keys=["cleanup.policy"])],
        include_synonyms=False, include_documentation=False), 4)
    assert [(c.name, c.value) for c in configs.results[0].configs] == [("cleanup.policy", "compact")]

    described = call(bs, StreamsGroupDescribeRequest(group_ids=[app_id, "nope-x"], include_authorized_operations=False),
                     0).groups
    group = next(g for g in described if g.group_id == app_id)
    missing = next(g for g in described if g.group_id == "nope-x")
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope-x not found.")
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch) == (0, "Stable", epoch,
                                                                                                 epoch)
    assert [(s.subtopology_id, [(t.name, t.partitions) for t in s.repartition_source_topics + s.state_changelog_topics])
            for s in group.topology.subtopologies] == [
        ("0", []), ("1", [(f"{app_id}-counts-repartition", 3), (f"{app_id}-counts-changelog", 3)])]
    [member] = group.members
    assert (member.member_id, member.member_epoch, member.process_id, member.topology_epoch, member.is_classic) == (
        "m1", epoch, "p1", 0, False)

    # The other protocols and APIs meeting a streams group.
    consumer = call(bs, ConsumerGroupHeartbeatRequest(group_id=app_id, member_id="c1", member_epoch=0,
                                                      rebalance_timeout_ms=1000, subscribed_topic_names=[topic],
                                                      topic_partitions=[]), 0)
    assert (consumer.error_code, consumer.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                             f"Group {app_id} is not a consumer group.")
    join = call(bs, JoinGroupRequest(group_id=app_id, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                     member_id="", protocol_type="consumer", protocols=[
                                         JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
    assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    v6 = call(bs, DescribeGroupsRequest(groups=[app_id], include_authorized_operations=False), 6).groups[0]
    assert (v6.error_code, v6.error_message, v6.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                                 f"Group {app_id} is not a classic group.", "Dead")
    listed = call(bs, ListGroupsRequest(states_filter=[], types_filter=["streams"]), 5).groups
    assert [(g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == app_id] == [
        ("streams", "Stable", "streams")]

    def commit(member_id: str, epoch: int) -> int:
        answer = call(bs, OffsetCommitRequest(group_id=app_id, generation_id_or_member_epoch=epoch, member_id=member_id,
                                              topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                                                  OffsetCommitRequest.OffsetCommitRequestPartition(
                                                      partition_index=0, committed_offset=1)])]), 9)
        return int(answer.topics[0].partitions[0].error_code)

    assert commit("m1", epoch + 5) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
    assert commit("m1", epoch) == ErrorCode.NONE

    left = heartbeat(bs, app_id, "m1", -1)
    assert (left.error_code, left.member_epoch, left.heartbeat_interval_ms, left.status) == (0, -1, 0, [])
    after = call(bs, StreamsGroupDescribeRequest(group_ids=[app_id], include_authorized_operations=False), 0).groups[0]
    assert (after.group_state, after.members) == ("Empty", [])


def test_standby_replicas_from_the_group_config(app: tuple[str, str], broker: Any) -> None:
    """streams.num.standby.replicas=1 (a GROUP config): two members of two processes each run half the
    tasks and hold the standby copies of the other's stateful tasks."""
    topic, app_id = app
    bs = broker.bootstrap
    iac = IncrementalAlterConfigsRequest
    altered = call(bs, iac(resources=[iac.AlterConfigsResource(resource_type=32, resource_name=app_id, configs=[
        iac.AlterableConfig(name="streams.num.standby.replicas", config_operation=0, value="1")])]), 1)
    assert altered.responses[0].error_code == 0
    topology = word_count(topic, app_id)
    held: dict[str, tuple[int, set[tuple[str, int]], set[tuple[str, int]]]] = {}
    for member, process in (("m1", "p1"), ("m2", "p2")):
        joined = heartbeat(bs, app_id, member, 0, topology, process_id=process)
        assert joined.error_code == 0, joined.error_message
        held[member] = (joined.member_epoch, set(), set())
    deadline = time.monotonic() + 30
    while True:  # each member reports what it holds until both are told the same again
        settled = True
        for member, (epoch, active, standby) in list(held.items()):
            beat = heartbeat(bs, app_id, member, epoch, active_tasks=_ids(active), standby_tasks=_ids(standby),
                             warmup_tasks=[])
            assert beat.error_code == 0, beat.error_message
            if beat.active_tasks is not None:
                active = {(t.subtopology_id, p) for t in beat.active_tasks for p in t.partitions}
                standby = {(t.subtopology_id, p) for t in beat.standby_tasks for p in t.partitions}
                settled = False
            settled &= beat.member_epoch == epoch
            held[member] = (beat.member_epoch, active, standby)
        group = call(bs, StreamsGroupDescribeRequest(group_ids=[app_id], include_authorized_operations=False),
                     0).groups[0]
        if settled and group.group_state == "Stable" and all(a for _, a, _ in held.values()):
            break
        assert time.monotonic() < deadline, (group.group_state, held)
        time.sleep(0.5)
    (_, active1, standby1), (_, active2, standby2) = held["m1"], held["m2"]
    everything = {(s, p) for s in ("0", "1") for p in range(3)}
    assert active1 | active2 == everything and not active1 & active2 and len(active1) == len(active2) == 3
    # Only the stateful subtopology ("1", with the changelog) gets copies.
    assert (standby1, standby2) == ({t for t in active2 if t[0] == "1"}, {t for t in active1 if t[0] == "1"})
    assert standby1 | standby2 == {("1", p) for p in range(3)}
    described = {m.member_id: {(t.subtopology_id, p) for t in m.assignment.standby_tasks for p in t.partitions}
                 for m in group.members}
    assert described == {"m1": standby1, "m2": standby2}


def _ids(tasks: set[tuple[str, int]]) -> list[Any]:
    by_sub: dict[str, list[int]] = {}
    for sub, p in sorted(tasks):
        by_sub.setdefault(sub, []).append(p)
    return [Q.TaskIds(subtopology_id=s, partitions=ps) for s, ps in by_sub.items()]


def test_topology_problems_as_kafka_reports_them(app: tuple[str, str], broker: Any) -> None:
    """Regexes and unsizable repartition topics refused; copartitioned topics of different sizes and
    missing source topics reported as statuses, the group NotReady, describing the declared topology."""
    topic, app_id = app
    bs = broker.bootstrap
    other = f"{topic}-4"
    call(bs, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=other, num_partitions=4, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000), 5)
    deadline = time.monotonic() + 20  # Kafka's coordinator sees a topic once its metadata image has it
    while not [t for t in call(bs, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=other)],
                                                   allow_auto_topic_creation=False), 12).topics
               if t.error_code == 0 and len(t.partitions) == 4]:
        assert time.monotonic() < deadline
        time.sleep(0.2)

    def sub(source: list[str], regex: list[str] | None = None, repartition: list[str] | None = None,
            copartition: bool = False) -> Any:
        return Q.Subtopology(
            subtopology_id="0", source_topics=source, source_topic_regex=regex or [], state_changelog_topics=[],
            repartition_sink_topics=[], repartition_source_topics=[
                Q.TopicInfo(name=r, partitions=0, replication_factor=0, topic_configs=[]) for r in repartition or []],
            copartition_groups=[Q.CopartitionGroup(source_topics=[0, 1], source_topic_regex=[],
                                                   repartition_source_topics=[])] if copartition else [])

    def join(group: str, subtopology: Any) -> Any:
        return heartbeat(bs, group, "m1", 0, Q.Topology(epoch=0, subtopologies=[subtopology]))

    regex = join(app_id, sub([], regex=[f"{topic}.*"]))
    assert (regex.error_code, regex.error_message) == (ErrorCode.INVALID_REQUEST,
                                                       "Regular expressions for source topics are not supported yet.")
    orphan = join(app_id, sub([], repartition=[f"{app_id}-orphan"]))
    assert (orphan.error_code, orphan.error_message) == (
        ErrorCode.STREAMS_INVALID_TOPOLOGY, "Failed to compute number of partitions for all repartition topics, "
                                            "because a repartition source topic is never used as a sink topic.")
    mismatch = join(app_id, sub([topic, other], copartition=True))
    assert mismatch.error_code == 0 and statuses(mismatch)[0] == DELAYED
    code, detail = statuses(mismatch)[1]
    assert code == 2 and detail.startswith("Following topics do not have the same number of partitions: [{")
    assert set(detail.split("[{")[1].rstrip("}]").split(", ")) == {f"{topic}=3", f"{other}=4"}
    missing_group = f"{app_id}-missing"
    missing = join(missing_group, sub([f"{topic}-nope"]))
    assert statuses(missing)[1:] == [(1, f"Source topics {topic}-nope are missing.")]
    described = call(bs, StreamsGroupDescribeRequest(group_ids=[app_id, missing_group],
                                                     include_authorized_operations=False), 0).groups
    by_id = {g.group_id: g for g in described}
    assert by_id[app_id].group_state == by_id[missing_group].group_state == "NotReady"
    assert [(s.subtopology_id, s.source_topics) for s in by_id[app_id].topology.subtopologies] == [
        ("0", [topic, other])]
    assert [(s.subtopology_id, s.source_topics) for s in by_id[missing_group].topology.subtopologies] == [
        ("0", [f"{topic}-nope"])]
