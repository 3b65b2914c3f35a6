"""ListGroups (16): every group, filtered by state (v4+) and type (v5+: "classic", "consumer",
"share"); share groups come from the broker's share-group owner."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.coordinator.groups.group_types import GroupListing
from grete.protocol.messages import ApiKey, ListGroupsRequest, ListGroupsResponse

SHARE = "share"


@api(ApiKey.LIST_GROUPS, 0, 5)
def handle(ctx: RequestContext[Groups], request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter} or None
    types = {t.lower() for t in request.types_filter} or None
    coordinator = ctx.broker.group_coordinator
    listed = coordinator.list_groups(states, types) + share_listings(ctx, states, types)
    if ctx.broker.authorizer is not None and not cluster_allowed(ctx, Op.DESCRIBE):
        # Never CLUSTER_AUTHORIZATION_FAILED: groups the principal may not describe are left out.
        listed = [g for g in listed if allowed(ctx, Op.DESCRIBE, Res.GROUP, g.group_id)]
    return ListGroupsResponse(error_code=coordinator.availability_error(), groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                       group_state=g.state, group_type=g.group_type)
        for g in listed])


def share_listings(ctx: RequestContext[Groups], states: set[str] | None, types: set[str] | None) -> list[GroupListing]:
    """Share groups as Kafka lists them: type and protocol type "share", state Empty or Stable, when
    no type filter is given or it names them."""
    share_groups = ctx.broker.share_groups
    if share_groups is None or (types is not None and SHARE not in types):
        return []
    found = []
    for group_id, group in sorted(share_groups.groups.items()):
        if states is None or group.state.lower() in states:
            found.append(GroupListing(group_id, SHARE, group.state, SHARE))
    return found
