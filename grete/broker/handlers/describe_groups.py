"""DescribeGroups (15): state, protocol and members with their metadata and assignment bytes
unchanged (kafka-consumer-groups decodes them). From v6 (KIP-1043) a group that does not exist, or is
not a classic group, is GROUP_ID_NOT_FOUND with Kafka's message instead of a Dead group."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authorizer import GROUP_OPERATIONS
from grete.broker.security.authz import Op, Res, allowed, operations
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeGroupsRequest, DescribeGroupsResponse


@api(ApiKey.DESCRIBE_GROUPS, 0, 6)
def handle(ctx: RequestContext[Groups], request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    described = []
    for group_id in request.groups:
        if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
            described.append(DescribeGroupsResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="",
                protocol_type="", protocol_data="", members=[], authorized_operations=-2147483648))
            continue
        d = ctx.broker.group_coordinator.describe_group(group_id)
        error, message = d.error, None
        if not d.found and ctx.version >= 6:  # KIP-1043: say so, where older versions answer Dead
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, d.not_found
        described.append(DescribeGroupsResponse.DescribedGroup(
            error_code=error, error_message=message, group_id=group_id, group_state=d.state,
            protocol_type=d.protocol_type,
            protocol_data=d.protocol,
            members=[DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in d.members],
            # Kafka fills them only in an answer without error (not for v6's GROUP_ID_NOT_FOUND).
            authorized_operations=operations(ctx, Res.GROUP, group_id, GROUP_OPERATIONS)
            if request.include_authorized_operations and error == ErrorCode.NONE
            else -2147483648))
    return DescribeGroupsResponse(groups=described)
