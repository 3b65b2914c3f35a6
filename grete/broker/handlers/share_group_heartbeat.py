"""ShareGroupHeartbeat (76): a share-group member joins, keeps its session, leaves; the answer
carries its member epoch and, when it changed, its assignment (KIP-932)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

Response = ShareGroupHeartbeatResponse


@api(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def handle(ctx: RequestContext[Groups], request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_epoch=-1)
    if not request.group_id:
        return Response(error_code=ErrorCode.INVALID_REQUEST, error_message="GroupId can't be empty.",
                        member_epoch=-1)
    denied = sorted(t for t in request.subscribed_topic_names or () if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, t))
    if denied:
        return Response(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, member_epoch=-1,
                        error_message=f"Topic authorization failed for topics: {denied}")
    shares = ctx.broker.share_groups
    status = shares.coordinator_error(request.group_id)
    if status is not None:
        return Response(error_code=status, member_epoch=-1)
    other = ctx.broker.group_coordinator.groups.get(request.group_id)
    if other is not None and other.state.value != "Dead":  # a classic or consumer group has the id
        return Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND, member_epoch=-1,
                        error_message=f"Group {request.group_id} is not a share group.")
    result = shares.heartbeat(request.group_id, request.member_id, request.member_epoch,
                              rack_id=request.rack_id, subscribed=request.subscribed_topic_names,
                              client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}")
    if result.error != ErrorCode.NONE or result.member is None:
        return Response(error_code=result.error, error_message=result.message, member_epoch=-1)
    written = await shares.write_membership(request.group_id)
    if written != ErrorCode.NONE:
        return Response(error_code=written, member_epoch=-1)
    member = result.member
    assignment = None
    if result.send_assignment:
        assignment = Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=topic_id, partitions=partitions)
            for topic_id, partitions in sorted(member.assignment.items())])
    return Response(error_code=0, member_id=member.member_id, member_epoch=member.epoch,
                    heartbeat_interval_ms=shares.heartbeat_interval_ms(request.group_id), assignment=assignment)
