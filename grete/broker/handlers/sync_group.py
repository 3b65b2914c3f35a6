"""SyncGroup (14): followers park until the leader's assignment arrives."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, SyncGroupRequest, SyncGroupResponse


@api(ApiKey.SYNC_GROUP, 0, 5)
async def handle(ctx: RequestContext[Groups], request: SyncGroupRequest) -> SyncGroupResponse:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    result = await ctx.broker.group_coordinator.sync_group(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=request.group_instance_id, protocol_type=request.protocol_type,
        protocol_name=request.protocol_name,
        assignments=[(a.member_id, bytes(a.assignment)) for a in request.assignments])
    return SyncGroupResponse(error_code=result.error, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)
