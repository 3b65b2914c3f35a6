"""CreateAcls (30): without an authorizer every creation fails with SECURITY_DISABLED, as in Kafka."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.handlers.describe_acls import NO_AUTHORIZER
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import CreateAclsRequest, CreateAclsResponse


@api(30, 1, 3)
def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    return CreateAclsResponse(results=[
        CreateAclsResponse.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        for _ in request.creations])
