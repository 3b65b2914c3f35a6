"""DeleteAcls (31): remove the ACLs each filter matches, answered per filter with what it removed.
Needs ALTER on the cluster; without an authorizer every filter fails with SECURITY_DISABLED, as in
Kafka."""

from __future__ import annotations

from grete.broker.handlers.describe_acls import NO_AUTHORIZER, filter_of, matching
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.acls import AclBinding, InvalidAcl, PatternType
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DeleteAclsRequest, DeleteAclsResponse

FilterResult = DeleteAclsResponse.DeleteAclsFilterResult


@api(ApiKey.DELETE_ACLS, 0, 3, advertised_min=1)
async def handle(ctx: RequestContext[Admin], request: DeleteAclsRequest) -> DeleteAclsResponse:
    if ctx.broker.authorizer is None or not cluster_allowed(ctx, Op.ALTER):
        code, message = ((ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER) if ctx.broker.authorizer is None
                         else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."))
        return DeleteAclsResponse(filter_results=[FilterResult(error_code=code, error_message=message,
                                                               matching_acls=[]) for _ in request.filters])
    results: list[FilterResult] = []
    doomed: set[AclBinding] = set()
    for entry in request.filters:
        try:
            found = matching(ctx, filter_of(entry))
        except InvalidAcl as exc:
            results.append(FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), matching_acls=[]))
            continue
        if ctx.version == 0:
            found = [a for a in found if a.pattern_type == PatternType.LITERAL]
        doomed.update(found)
        results.append(FilterResult(error_code=0, error_message=None, matching_acls=[
            DeleteAclsResponse.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name,
                pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation,
                permission_type=a.permission)
            for a in sorted(found, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type,
                                                  a.principal, a.host, a.operation, a.permission))]))
    if doomed:
        try:
            await ctx.broker.metadata.remove_acls(sorted(doomed, key=repr))
        except KafkaError as exc:
            for result in results:
                if result.error_code == 0:
                    result.error_code, result.error_message, result.matching_acls = exc.code, str(exc), []
    return DeleteAclsResponse(filter_results=results)
