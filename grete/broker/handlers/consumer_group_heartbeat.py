"""ConsumerGroupHeartbeat (68): the KIP-848 consumer protocol's one membership API (join, heartbeat,
acknowledge revocations, leave), served by the group coordinator's consumer part."""

from __future__ import annotations

import uuid
from collections import defaultdict

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.groups.consumer_assignors import Assignment
from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

Response = ConsumerGroupHeartbeatResponse


@api(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle(ctx: RequestContext[Groups], request: ConsumerGroupHeartbeatRequest) -> Response:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if ctx.broker.share_groups.holds(request.group_id):
        return Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {request.group_id} is not a consumer group.")
    owned = (None if request.topic_partitions is None else
             frozenset((t.topic_id, p) for t in request.topic_partitions for p in t.partitions))
    result = await ctx.broker.group_coordinator.consumer_group_heartbeat(ConsumerHeartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.version >= 1 else None,
        server_assignor=request.server_assignor, owned=owned, client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}", version=ctx.version))
    if result.error is not ErrorCode.NONE:
        return Response(error_code=result.error, error_message=result.message)
    return Response(member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval_ms=result.heartbeat_interval_ms,
                    assignment=None if result.assignment is None else _assignment(result.assignment))


def _assignment(assignment: Assignment) -> Response.Assignment:
    by_topic: dict[uuid.UUID, list[int]] = defaultdict(list)
    for topic_id, partition in sorted(assignment):
        by_topic[topic_id].append(partition)
    return Response.Assignment(topic_partitions=[
        Response.TopicPartitions(topic_id=topic_id, partitions=partitions)
        for topic_id, partitions in by_topic.items()])
