"""StreamsGroupDescribe (89): KIP-1071 groups with their epochs, topology (as configured against the
topics: the partition counts decided for internal topics), members, current and target tasks. A group
of another type answers GROUP_ID_NOT_FOUND, as Kafka 4.3.1 does."""

from __future__ import annotations

from collections import defaultdict

from grete.broker.handlers.consumer_group_describe import NO_OPERATIONS
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authorizer import GROUP_OPERATIONS
from grete.broker.security.authz import Op, Res, allowed, operations
from grete.coordinator.groups.streams_state import StreamsGroup, StreamsMember, Tasks
from grete.coordinator.groups.streams_topology import TopicInfo
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, StreamsGroupDescribeRequest, StreamsGroupDescribeResponse

Response = StreamsGroupDescribeResponse


@api(ApiKey.STREAMS_GROUP_DESCRIBE, 0, 0)
def handle(ctx: RequestContext[Groups], request: StreamsGroupDescribeRequest) -> Response:
    described = []
    for group_id in request.group_ids:
        if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
            described.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        error, message, group = ctx.broker.group_coordinator.describe_streams_group(group_id)
        if group is None:
            described.append(_failed(group_id, error, message))
            continue
        described.append(Response.DescribedGroup(
            group_id=group_id, group_state=group.state_name(), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, topology=_topology(ctx, group),
            members=[_member(m, group) for m in group.members.values()],
            authorized_operations=operations(ctx, Res.GROUP, group_id, GROUP_OPERATIONS)
            if request.include_authorized_operations else NO_OPERATIONS))
    return Response(groups=described)


def _failed(group_id: str, error: ErrorCode, message: str | None) -> Response.DescribedGroup:
    return Response.DescribedGroup(error_code=error, error_message=message, group_id=group_id, group_state="",
                                   group_epoch=0, assignment_epoch=0, topology=None, members=[],
                                   authorized_operations=NO_OPERATIONS)


def _topology(ctx: RequestContext[Groups], group: StreamsGroup) -> Response.Topology | None:
    """The subtopologies with the internal topics' partition counts as configured, or as the
    topology declares them while it is not ready (missing or wrongly partitioned topics), as Kafka
    4.3.1 answers."""
    topology = group.topology
    if topology is None:
        return None
    view = ctx.broker.group_coordinator.ctx.topic_view() if group.configured.ready else {}

    def info(i: TopicInfo, partitions: int) -> Response.TopicInfo:
        return Response.TopicInfo(name=i.name, partitions=partitions, replication_factor=i.replication_factor,
                                  topic_configs=[Response.KeyValue(key=k, value=v) for k, v in i.configs])

    def size(i: TopicInfo) -> int:
        return view[i.name][1] if i.name in view else i.partitions

    return Response.Topology(epoch=topology.epoch, subtopologies=[
        Response.Subtopology(subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                             repartition_sink_topics=list(s.repartition_sink_topics),
                             state_changelog_topics=[info(i, size(i)) for i in s.state_changelog_topics],
                             repartition_source_topics=[info(i, size(i)) for i in s.repartition_source_topics])
        for s in topology.subtopologies])


def _member(m: StreamsMember, group: StreamsGroup) -> Response.Member:
    return Response.Member(
        member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
        client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=None if m.user_endpoint is None else Response.Endpoint(host=m.user_endpoint[0],
                                                                             port=m.user_endpoint[1]),
        client_tags=[Response.KeyValue(key=k, value=v) for k, v in m.client_tags],
        task_offsets=[Response.TaskOffset(subtopology_id=s, partition=p, offset=o) for s, p, o in m.task_offsets],
        task_end_offsets=[Response.TaskOffset(subtopology_id=s, partition=p, offset=o)
                          for s, p, o in m.task_end_offsets],
        assignment=_assignment(m.assigned, m.standby),
        target_assignment=_assignment(group.target.get(m.member_id, frozenset()),
                                      group.target_standby.get(m.member_id, frozenset())),
        is_classic=False)


def _assignment(active: Tasks, standby: Tasks) -> Response.Assignment:
    return Response.Assignment(active_tasks=_task_ids(active), standby_tasks=_task_ids(standby), warmup_tasks=[])


def _task_ids(tasks: Tasks) -> list[Response.TaskIds]:
    by_sub: dict[str, list[int]] = defaultdict(list)
    for sub, p in sorted(tasks):
        by_sub[sub].append(p)
    return [Response.TaskIds(subtopology_id=s, partitions=ps) for s, ps in by_sub.items()]
