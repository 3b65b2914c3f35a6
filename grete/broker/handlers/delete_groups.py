"""DeleteGroups (42): only empty groups (NON_EMPTY_GROUP otherwise); offsets go with them. Share
groups are deleted by their own owner (their share partitions' state goes too)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DeleteGroupsRequest, DeleteGroupsResponse


@api(ApiKey.DELETE_GROUPS, 0, 2)
async def handle(ctx: RequestContext[Groups], request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    permitted = [g for g in request.groups_names if allowed(ctx, Op.DELETE, Res.GROUP, g)]
    results: dict[str, int] = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in request.groups_names}
    share_groups = ctx.broker.share_groups
    shared = [g for g in permitted if share_groups is not None and g in share_groups.groups]
    for group_id in shared:
        assert share_groups is not None
        results[group_id] = await share_groups.delete_group(group_id)
    others = [g for g in permitted if g not in shared]
    if others:
        results.update(await ctx.broker.group_coordinator.delete_groups(others))
    return DeleteGroupsResponse(results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g])
        for g in request.groups_names])
