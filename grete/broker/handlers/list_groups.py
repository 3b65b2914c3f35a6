"""ListGroups (16): every group, filtered by state (v4+) and type (v5+, "classic")."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.messages import ListGroupsRequest, ListGroupsResponse


@api(16, 0, 5)
def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter} or None
    types = {t.lower() for t in request.types_filter} or None
    coordinator = ctx.broker.group_coordinator
    listed = coordinator.list_groups(states, types)
    return ListGroupsResponse(error_code=coordinator.availability_error(), groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                       group_state=g.state, group_type=g.group_type)
        for g in listed])
