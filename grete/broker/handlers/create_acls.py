"""CreateAcls (30): add ACL bindings, each answered on its own (INVALID_REQUEST for a binding Kafka
refuses). Needs ALTER on the cluster; without an authorizer every creation fails with
SECURITY_DISABLED, as in Kafka."""

from __future__ import annotations

from grete.broker.handlers.describe_acls import NO_AUTHORIZER
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAcl,
    PatternType,
    ResourceType,
    validate_binding,
)
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, CreateAclsRequest, CreateAclsResponse

Result = CreateAclsResponse.AclCreationResult


def _binding(entry: CreateAclsRequest.AclCreation) -> AclBinding:
    try:
        acl = AclBinding(ResourceType(entry.resource_type), entry.resource_name,
                         PatternType(entry.resource_pattern_type), entry.principal, entry.host,
                         AclOperation(entry.operation), AclPermissionType(entry.permission_type))
    except ValueError as exc:
        raise InvalidAcl(str(exc)) from None
    validate_binding(acl)
    return acl


@api(ApiKey.CREATE_ACLS, 0, 3, advertised_min=1)
async def handle(ctx: RequestContext[Admin], request: CreateAclsRequest) -> CreateAclsResponse:
    if ctx.broker.authorizer is None:
        return CreateAclsResponse(results=[Result(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
                                           for _ in request.creations])
    if not cluster_allowed(ctx, Op.ALTER):
        return CreateAclsResponse(results=[Result(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  error_message="Cluster authorization failed.")
                                           for _ in request.creations])
    results: list[Result] = []
    valid: list[AclBinding] = []
    for entry in request.creations:
        try:
            valid.append(_binding(entry))
            results.append(Result(error_code=0, error_message=None))
        except InvalidAcl as exc:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc)))
    if valid:
        try:
            await ctx.broker.metadata.add_acls(valid)
        except KafkaError as exc:
            for result in results:
                if result.error_code == 0:
                    result.error_code, result.error_message = exc.code, str(exc)
    return CreateAclsResponse(results=results)
