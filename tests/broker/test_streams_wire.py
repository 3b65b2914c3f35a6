"""Streams groups (KIP-1071) on the wire against an in-process broker: the heartbeat handler creates
the internal topics the topology needs (sizes and configs), tasks follow, commits check the member
epoch, and the group comes back from the broker's own ``__consumer_offsets`` after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from grete.testing._wire import Wire
from grete.testing.inprocess import broker

Q = StreamsGroupHeartbeatRequest
REPARTITION, CHANGELOG = "app-counts-repartition", "app-counts-changelog"
TOPOLOGY = Q.Topology(epoch=0, subtopologies=[
    Q.Subtopology(subtopology_id="0", source_topics=["lines"], source_topic_regex=[], state_changelog_topics=[],
                  repartition_sink_topics=[REPARTITION], repartition_source_topics=[], copartition_groups=[]),
    Q.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[], repartition_sink_topics=[],
                  state_changelog_topics=[Q.TopicInfo(name=CHANGELOG, partitions=0, replication_factor=0, topic_configs=[
                      Q.KeyValue(key="cleanup.policy", value="compact")])],
                  repartition_source_topics=[Q.TopicInfo(name=REPARTITION, partitions=0, replication_factor=0,
                                                         topic_configs=[Q.KeyValue(key="retention.ms", value="-1")])],
                  copartition_groups=[])])


def heartbeat(wire: Wire, member: str, epoch: int, **fields: Any) -> Any:
    joining = epoch == 0
    request = Q(group_id="app", member_id=member, member_epoch=epoch, endpoint_information_epoch=0,
                rebalance_timeout_ms=30000 if joining else -1, topology=TOPOLOGY if joining else None,
                active_tasks=[] if joining else None, standby_tasks=[] if joining else None,
                warmup_tasks=[] if joining else None, process_id="p1" if joining else None)
    for name, value in fields.items():
        setattr(request, name, value)
    response = wire.call(request, StreamsGroupHeartbeatResponse, 0)
    assert response.error_code == 0, response.error_message
    return response


def partition_counts(wire: Wire) -> dict[str, int]:
    meta = wire.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), MetadataResponse, 12)
    return {t.name: len(t.partitions) for t in meta.topics}


def config_value(wire: Wire, topic: str, key: str) -> str | None:
    answer = wire.call(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=[key])]), DescribeConfigsResponse, 4)
    return next(c.value for c in answer.results[0].configs)


def test_internal_topics_tasks_commits_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    overrides = {"group.streams.initial.rebalance.delay.ms": "0"}
    with broker(overrides, data_dir=data, topics={"lines": 3}) as b:
        wire = Wire(b.host, b.port)
        joined = heartbeat(wire, "m1", 0)
        assert [s.status_code for s in joined.status] == [3] and joined.active_tasks == []
        # The handler created both internal topics: sized from "lines", with the topology's configs.
        counts = partition_counts(wire)
        assert (counts[REPARTITION], counts[CHANGELOG]) == (3, 3)
        assert config_value(wire, CHANGELOG, "cleanup.policy") == "compact"
        assert config_value(wire, REPARTITION, "retention.ms") == "-1"
        beat = heartbeat(wire, "m1", joined.member_epoch)
        assert beat.status == [] and beat.member_epoch > joined.member_epoch
        assert [(t.subtopology_id, t.partitions) for t in beat.active_tasks] == [("0", [0, 1, 2]), ("1", [0, 1, 2])]
        commit = OffsetCommitRequest(group_id="app", generation_id_or_member_epoch=beat.member_epoch, member_id="m1",
                                     topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="lines", partitions=[
                                         OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0,
                                                                                          committed_offset=7)])])
        assert wire.call(commit, OffsetCommitResponse, 9).topics[0].partitions[0].error_code == 0
        commit.generation_id_or_member_epoch = joined.member_epoch
        answer = wire.call(commit, OffsetCommitResponse, 9).topics[0].partitions[0].error_code
        assert answer == ErrorCode.STALE_MEMBER_EPOCH
        epoch = beat.member_epoch
        wire.close()
    with broker(overrides, data_dir=data) as b:
        wire = Wire(b.host, b.port)
        group = wire.call(StreamsGroupDescribeRequest(group_ids=["app"]), StreamsGroupDescribeResponse, 0).groups[0]
        assert (group.error_code, group.group_state, group.assignment_epoch) == (0, "Stable", epoch)
        [member] = group.members
        assert (member.member_id, member.member_epoch, member.process_id) == ("m1", epoch, "p1")
        assert sum(len(t.partitions) for t in member.assignment.active_tasks) == 6
        # The member carries on at its epoch (a restart is not a rebalance for it).
        again = heartbeat(wire, "m1", epoch, active_tasks=[
            Q.TaskIds(subtopology_id=s, partitions=[0, 1, 2]) for s in ("0", "1")], standby_tasks=[], warmup_tasks=[])
        assert again.member_epoch >= epoch
        wire.close()
