"""DescribeAcls (29): the ACLs a filter matches, grouped by resource pattern. Needs DESCRIBE on the
cluster. Without an authorizer, SECURITY_DISABLED as Apache Kafka answers when
``authorizer.class.name`` is unset."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    InvalidAcl,
    PatternType,
    ResourceType,
)
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeAclsRequest, DescribeAclsResponse

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(kind: Any, value: int, label: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidAcl(f"Unknown {label} {value}") from None


def filter_of(entry: Any) -> AclFilter:
    """An AclFilter from DescribeAcls' request or one of DeleteAcls' filters; InvalidAcl if bad."""
    acl_filter = AclFilter(_enum(ResourceType, entry.resource_type_filter, "resource type"),
                           entry.resource_name_filter,
                           _enum(PatternType, entry.pattern_type_filter, "pattern type"),
                           entry.principal_filter, entry.host_filter,
                           _enum(AclOperation, entry.operation, "operation"),
                           _enum(AclPermissionType, entry.permission_type, "permission type"))
    acl_filter.validate()
    return acl_filter


def matching(ctx: RequestContext[Admin], acl_filter: AclFilter) -> list[AclBinding]:
    return [acl for acl in ctx.broker.metadata.acls() if acl_filter.matches(acl)]


@api(ApiKey.DESCRIBE_ACLS, 0, 3, advertised_min=1)
def handle(ctx: RequestContext[Admin], request: DescribeAclsRequest) -> DescribeAclsResponse:
    if ctx.broker.authorizer is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                    error_message=NO_AUTHORIZER, resources=[])
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message="Cluster authorization failed.", resources=[])
    try:
        acl_filter = filter_of(request)
    except InvalidAcl as exc:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), resources=[])
    groups: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for acl in matching(ctx, acl_filter):
        if ctx.version == 0 and acl.pattern_type != PatternType.LITERAL:
            continue  # v0 has no pattern type: literal resources only
        groups[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
    resources = [DescribeAclsResponse.DescribeAclsResource(
        resource_type=rtype, resource_name=name, pattern_type=pattern,
        acls=[DescribeAclsResponse.AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                                                  permission_type=a.permission)
              for a in sorted(acls, key=lambda a: (a.principal, a.host, a.operation, a.permission))])
        for (rtype, name, pattern), acls in sorted(groups.items())]
    return DescribeAclsResponse(error_code=0, error_message=None, resources=resources)
