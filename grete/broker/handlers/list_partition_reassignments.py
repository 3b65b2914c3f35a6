"""ListPartitionReassignments (46): a single node never has a reassignment in progress."""

from __future__ import annotations

from grete.broker.authz import Op, cluster_allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse


@api(46, 0, 0)
def handle(ctx: RequestContext, request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, topics=[])
