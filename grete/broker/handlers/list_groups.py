"""ListGroups (16): every group, filtered by state (v4+) and type (v5+, "classic")."""

from __future__ import annotations

from grete.broker.authz import Op, Res, allowed, cluster_allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.messages import ListGroupsRequest, ListGroupsResponse


@api(16, 0, 5)
def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter} or None
    types = {t.lower() for t in request.types_filter} or None
    coordinator = ctx.broker.group_coordinator
    listed = coordinator.list_groups(states, types)
    if ctx.broker.authorizer is not None and not cluster_allowed(ctx, Op.DESCRIBE):
        # Never CLUSTER_AUTHORIZATION_FAILED: groups the principal may not describe are left out.
        listed = [g for g in listed if allowed(ctx, Op.DESCRIBE, Res.GROUP, g.group_id)]
    return ListGroupsResponse(error_code=coordinator.availability_error(), groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                       group_state=g.state, group_type=g.group_type)
        for g in listed])
