"""What handlers ask the authorizer, about the request's principal and host: always yes when no
authorizer is configured (``authorizer.class.name`` unset), as in Kafka."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import Basics
from grete.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType

Op = AclOperation
Res = ResourceType
# Kafka's Errors.CLUSTER_AUTHORIZATION_FAILED.message(), which answers carrying a message give.
CLUSTER_DENIED = "Cluster authorization failed."


def allowed(ctx: RequestContext[Basics], operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.session.principal, ctx.session.client_host, operation,
                                                      resource_type, name)


def cluster_allowed(ctx: RequestContext[Basics], operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_any(ctx: RequestContext[Basics], operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize_any(ctx.session.principal, ctx.session.client_host,
                                                          operation, resource_type)


def operations(ctx: RequestContext[Basics], resource_type: ResourceType, name: str,
               candidates: tuple[AclOperation, ...]) -> int:
    """The authorized-operations bitfield; every candidate without an authorizer."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return sum(1 << int(op) for op in candidates)
    return authorizer.operations(ctx.session.principal, ctx.session.client_host, resource_type, name, candidates)
