"""ConsumerGroupHeartbeat / ConsumerGroupDescribe and OffsetCommit / OffsetFetch v9 on the wire, with
the versions, codes and messages a Kafka 4.3.1 broker answers (recorded from one)."""

from __future__ import annotations

from typing import Any

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from grete.testing._wire import Wire

HB = ConsumerGroupHeartbeatRequest


def heartbeat(wire: Wire, group: str, member: str, epoch: int = 0, **fields: Any) -> ConsumerGroupHeartbeatResponse:
    base: dict[str, Any] = dict(group_id=group, member_id=member, member_epoch=epoch, instance_id=None,
                                rack_id=None, rebalance_timeout_ms=30000 if epoch == 0 else -1,
                                subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
                                topic_partitions=[] if epoch == 0 else None)
    base.update(fields)
    response: ConsumerGroupHeartbeatResponse = wire.call(HB(**base), ConsumerGroupHeartbeatResponse, 1)
    return response


def commit(wire: Wire, group: str, member: str, epoch: int, topic: str, version: int = 9) -> int:
    response = wire.call(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
        retention_time_ms=-1, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                             committed_leader_epoch=-1, committed_metadata="")])]),
        OffsetCommitResponse, version)
    return int(response.topics[0].partitions[0].error_code)


def test_versions_are_kafka_431s(grete_broker: Any) -> None:
    wire = Wire(grete_broker.host, grete_broker.port)
    versions = {k.api_key: (k.min_version, k.max_version)
                for k in wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                   ApiVersionsResponse, 3).api_keys}
    assert versions[68] == (0, 1) and versions[69] == (0, 1)
    assert versions[8][1] >= 9 and versions[9][1] >= 9


def test_a_member_joins_commits_with_its_epoch_and_is_described(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 3)
    wire = Wire(grete_broker.host, grete_broker.port)
    joined = heartbeat(wire, "g848", "member-a", subscribed_topic_names=[topic_name])
    assert joined.error_code == 0 and joined.member_epoch >= 1 and joined.heartbeat_interval_ms == 5000
    assert joined.assignment is not None
    assert sorted(p for t in joined.assignment.topic_partitions for p in t.partitions) == [0, 1, 2]
    epoch = joined.member_epoch
    assert commit(wire, "g848", "member-a", epoch, topic_name) == ErrorCode.NONE
    assert commit(wire, "g848", "member-a", epoch - 1, topic_name) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(wire, "g848", "member-a", epoch, topic_name, version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert commit(wire, "g848", "member-a", epoch, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    fetched = wire.call(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="g848", member_id="member-a", member_epoch=epoch + 1, topics=None)], require_stable=True),
        OffsetFetchResponse, 9)
    assert fetched.groups[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
    described = wire.call(ConsumerGroupDescribeRequest(group_ids=["g848", "nope"], include_authorized_operations=True),
                          ConsumerGroupDescribeResponse, 1)
    group, missing = described.groups
    assert (group.group_state, group.assignor_name, group.authorized_operations) == ("Stable", "uniform", 3400)
    [member] = group.members
    assert (member.member_id, member.member_epoch, member.member_type) == ("member-a", epoch, 1)
    assert member.assignment.topic_partitions[0].topic_name == topic_name
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    left = heartbeat(wire, "g848", "member-a", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)


def test_invalid_heartbeats_get_kafkas_messages(grete_broker: Any) -> None:
    wire = Wire(grete_broker.host, grete_broker.port)
    cases = [
        (dict(member="", topics=["t"]), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
        (dict(member="m", topics=["t"], rebalance_timeout_ms=-1), ErrorCode.INVALID_REQUEST,
         "RebalanceTimeoutMs must be provided in first request."),
        (dict(member="m", topics=None), ErrorCode.INVALID_REQUEST,
         "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
        (dict(member="m", topics=["t"], server_assignor="foo"), ErrorCode.UNSUPPORTED_ASSIGNOR,
         "ServerAssignor foo is not supported. Supported assignors: uniform, range."),
    ]
    for fields, code, message in cases:
        member, topics = fields.pop("member"), fields.pop("topics")
        response = heartbeat(wire, "g-invalid", str(member), subscribed_topic_names=topics, **fields)
        assert (response.error_code, response.error_message) == (code, message)


def test_a_consumer_group_survives_a_broker_restart(tmp_path: Any) -> None:
    from grete.testing import broker

    with broker(data_dir=tmp_path) as first:
        first.create_topic("restart-topic", 2)
        wire = Wire(first.host, first.port)
        joined = heartbeat(wire, "g-restart", "member-r", subscribed_topic_names=["restart-topic"],
                           instance_id="inst-r")
        assert joined.error_code == 0
        assert commit(wire, "g-restart", "member-r", joined.member_epoch, "restart-topic") == ErrorCode.NONE
        wire.close()
    with broker(data_dir=tmp_path) as second:
        wire = Wire(second.host, second.port)
        owned = [HB.TopicPartitions(topic_id=t.topic_id, partitions=t.partitions)
                 for t in joined.assignment.topic_partitions]
        again = heartbeat(wire, "g-restart", "member-r", joined.member_epoch, instance_id="inst-r",
                          topic_partitions=owned)
        assert (again.error_code, again.member_epoch >= joined.member_epoch) == (0, True)
        described = wire.call(ConsumerGroupDescribeRequest(group_ids=["g-restart"], include_authorized_operations=False),
                              ConsumerGroupDescribeResponse, 1).groups[0]
        [member] = described.members
        assert (member.member_id, member.instance_id) == ("member-r", "inst-r")
        assert sorted(member.assignment.topic_partitions[0].partitions) == [0, 1]
        assert commit(wire, "g-restart", "member-r", again.member_epoch, "restart-topic") == ErrorCode.NONE
        wire.close()


def test_offset_commit_and_fetch_v10_name_topics_by_id(grete_broker: Any, topic_name: str) -> None:
    """As Kafka 4.3.1 answers: an unknown topic id is UNKNOWN_TOPIC_ID for each of its partitions."""
    import uuid

    from grete.protocol.messages import MetadataRequest, MetadataResponse

    grete_broker.create_topic(topic_name, 2)
    wire = Wire(grete_broker.host, grete_broker.port)
    topic_id = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)],
                                         allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                         MetadataResponse, 12).topics[0].topic_id
    stranger = uuid.uuid4()

    def commit_v10(tid: uuid.UUID) -> list[tuple[int, int]]:
        response = wire.call(OffsetCommitRequest(
            group_id="g10", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=tid, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=3,
                                                                 committed_leader_epoch=-1, committed_metadata="")
                for p in (0, 5)])]), OffsetCommitResponse, 10)
        assert response.topics[0].topic_id == tid
        return [(p.partition_index, p.error_code) for p in response.topics[0].partitions]

    assert commit_v10(topic_id) == [(0, 0), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert commit_v10(stranger) == [(0, ErrorCode.UNKNOWN_TOPIC_ID), (5, ErrorCode.UNKNOWN_TOPIC_ID)]
    fetched = wire.call(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="g10", member_id=None, member_epoch=-1, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=topic_id, partition_indexes=[0, 1]),
            OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=stranger, partition_indexes=[0])])],
        require_stable=False), OffsetFetchResponse, 10)
    got = {t.topic_id: [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions]
           for t in fetched.groups[0].topics}
    assert got == {topic_id: [(0, 3, 0), (1, -1, 0)], stranger: [(0, -1, ErrorCode.UNKNOWN_TOPIC_ID)]}


def test_regexes_re2j_refuses_are_refused(grete_broker: Any) -> None:
    """Kafka compiles SubscribedTopicRegex with RE2J: no look-arounds, no back-references."""
    wire = Wire(grete_broker.host, grete_broker.port)
    for pattern, why in [("(?=p)p10", "invalid or unsupported Perl syntax"), ("(p)\\1", "invalid escape sequence"),
                         ("[", "missing closing ]")]:
        response = heartbeat(wire, "g-regex", "member-x", subscribed_topic_regex=pattern)
        assert (response.error_code, response.error_message) == (
            ErrorCode.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {why}.")
