"""DeleteAcls (31): without an authorizer every filter fails with SECURITY_DISABLED, as in Kafka."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.handlers.describe_acls import NO_AUTHORIZER
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DeleteAclsRequest, DeleteAclsResponse


@api(31, 1, 3)
def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER,
                                                  matching_acls=[])
        for _ in request.filters])
