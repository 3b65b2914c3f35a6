"""LeaveGroup (13): one member (v0-2) or a batch of members by id or instance id (v3+)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.groups.group_types import LeaveMember
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, LeaveGroupRequest, LeaveGroupResponse


@api(ApiKey.LEAVE_GROUP, 0, 5)
async def handle(ctx: RequestContext[Groups], request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if ctx.version >= 3:
        members = [LeaveMember(m.member_id, m.group_instance_id, m.reason) for m in request.members]
    else:
        members = [LeaveMember(request.member_id)]
    error, results = await ctx.broker.group_coordinator.leave_group(group_id=request.group_id,
                                                                    members=members)
    if ctx.version < 3 and results and not error:
        error = results[0][1]
    return LeaveGroupResponse(error_code=error, members=[
        LeaveGroupResponse.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                          error_code=code) for m, code in results] if ctx.version >= 3 else [])
