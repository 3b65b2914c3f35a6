"""ConsumerGroupDescribe (69): KIP-848 groups with their epochs, members, current and target
assignments. A classic group answers GROUP_ID_NOT_FOUND, which sends Kafka's admin client to
DescribeGroups."""

from __future__ import annotations

import uuid
from collections import defaultdict

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authorizer import GROUP_OPERATIONS
from grete.broker.security.authz import Op, Res, allowed, operations
from grete.coordinator.groups.consumer_assignors import Assignment
from grete.coordinator.groups.consumer_state import ConsumerGroup, ConsumerMember
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

Response = ConsumerGroupDescribeResponse
NO_OPERATIONS = -2147483648
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # v1's MemberType: the protocol the member speaks


@api(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
def handle(ctx: RequestContext[Groups], request: ConsumerGroupDescribeRequest) -> Response:
    names = {meta.topic_id: name for name, meta in ctx.broker.metadata.topics().items()}
    described = []
    for group_id in request.group_ids:
        if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
            described.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        if ctx.broker.share_groups.holds(group_id):
            described.append(_failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."))
            continue
        error, message, group = ctx.broker.group_coordinator.describe_consumer_group(group_id)
        if group is None:
            described.append(_failed(group_id, error, message))
            continue
        described.append(Response.DescribedGroup(
            group_id=group_id, group_state=group.state_name(), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=_assignor(ctx, group),
            members=[_member(m, group, names) for m in group.members.values()],
            authorized_operations=operations(ctx, Res.GROUP, group_id, GROUP_OPERATIONS)
            if request.include_authorized_operations else NO_OPERATIONS))
    return Response(groups=described)


def _failed(group_id: str, error: ErrorCode, message: str | None) -> Response.DescribedGroup:
    return Response.DescribedGroup(error_code=error, error_message=message, group_id=group_id, group_state="",
                                   group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                                   authorized_operations=NO_OPERATIONS)


def _assignor(ctx: RequestContext[Groups], group: ConsumerGroup) -> str:
    return group.assignor or ctx.broker.group_coordinator.config.consumer_assignors[0]


def _member(m: ConsumerMember, group: ConsumerGroup, names: dict[uuid.UUID, str]) -> Response.Member:
    return Response.Member(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex or "",
        assignment=_assignment(m.assigned, names),
        target_assignment=_assignment(group.target.get(m.member_id, frozenset()), names),
        member_type=CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE)


def _assignment(assignment: Assignment, names: dict[uuid.UUID, str]) -> Response.Assignment:
    by_topic: dict[uuid.UUID, list[int]] = defaultdict(list)
    for topic_id, partition in sorted(assignment):
        by_topic[topic_id].append(partition)
    return Response.Assignment(topic_partitions=[
        Response.TopicPartitions(topic_id=topic_id, topic_name=names.get(topic_id, ""), partitions=partitions)
        for topic_id, partitions in by_topic.items()])
