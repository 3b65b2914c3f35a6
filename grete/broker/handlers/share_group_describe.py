"""ShareGroupDescribe (77): a share group's epochs, assignor and members with their assignments."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authorizer import GROUP_OPERATIONS
from grete.broker.security.authz import Op, Res, allowed, operations
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ShareGroupDescribeRequest, ShareGroupDescribeResponse

Response = ShareGroupDescribeResponse


@api(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
def handle(ctx: RequestContext[Groups], request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    return Response(groups=[_describe(ctx, group_id, request.include_authorized_operations)
                            for group_id in request.group_ids])


def _describe(ctx: RequestContext[Groups], group_id: str, include_operations: bool) -> Response.DescribedGroup:
    if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
        return Response.DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    status = ctx.broker.share_groups.coordinator_error(group_id)
    if status is not None:
        return Response.DescribedGroup(group_id=group_id, error_code=status)
    group = ctx.broker.share_groups.groups.get(group_id)
    if group is None:
        return Response.DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                       error_message=f"Group {group_id} not found.", group_state="Dead")
    names = {meta.topic_id: meta.name for meta in ctx.broker.metadata.topics().values()}
    members = [Response.Member(
        member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch, client_id=m.client_id,
        client_host=m.client_host, subscribed_topic_names=list(m.subscribed),
        assignment=Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=topic_id, topic_name=names.get(topic_id, ""), partitions=parts)
            for topic_id, parts in sorted(m.assignment.items())]))
        for m in group.members.values()]
    return Response.DescribedGroup(
        group_id=group_id, group_state=group.state, group_epoch=group.epoch,
        assignment_epoch=group.assignment_epoch, assignor_name="simple", members=members,
        authorized_operations=(operations(ctx, Res.GROUP, group_id, GROUP_OPERATIONS)
                               if include_operations else -2147483648))
