"""JoinGroup (11): parked until the rebalance completes (grete.coordinator.groups.group)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, JoinGroupRequest, JoinGroupResponse


@api(ApiKey.JOIN_GROUP, 0, 9)
async def handle(ctx: RequestContext[Groups], request: JoinGroupRequest) -> JoinGroupResponse:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                 protocol_name=None if ctx.version >= 7 else "", leader="", member_id="",
                                 members=[])
    if ctx.broker.share_groups.holds(request.group_id):
        # A share group has the id: Kafka 4.3.1 answers INCONSISTENT_GROUP_PROTOCOL, no member id.
        return JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, generation_id=-1,
                                 protocol_name=None if ctx.version >= 7 else "", leader="", member_id="",
                                 members=[])
    result = await ctx.broker.group_coordinator.join_group(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=request.group_instance_id, client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}", session_timeout_ms=request.session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout for it.
        rebalance_timeout_ms=request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.version >= 4, reason=request.reason,
        supports_skip_assignment=ctx.version >= 9)
    return JoinGroupResponse(
        error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if result.protocol_name is not None or ctx.version >= 7 else "",
        leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m.member_id,
                                                           group_instance_id=m.group_instance_id,
                                                           metadata=m.metadata) for m in result.members])
