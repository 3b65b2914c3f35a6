"""Heartbeat (12): keeps a member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, HeartbeatRequest, HeartbeatResponse


@api(ApiKey.HEARTBEAT, 0, 4)
async def handle(ctx: RequestContext[Groups], request: HeartbeatRequest) -> HeartbeatResponse:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = await ctx.broker.group_coordinator.heartbeat(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=request.group_instance_id)
    return HeartbeatResponse(error_code=error)
