"""DescribeClientQuotas (48): the quota entities matching a filter, with their values. Needs
DESCRIBE_CONFIGS on the cluster. Filters as Kafka's ClientQuotasImage reads them: per entity type
EXACT (a name), DEFAULT (the type's <default>) or SPECIFIED (any entity naming the type); with
``strict``, an entity must name no other type. A malformed filter is INVALID_REQUEST with Kafka's
message; an unknown entity type UNSUPPORTED_VERSION."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.metadata import QuotaEntity
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DescribeClientQuotasRequest, DescribeClientQuotasResponse

Response = DescribeClientQuotasResponse
ENTITY_TYPES = ("user", "client-id", "ip")
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
def handle(ctx: RequestContext[Admin], request: DescribeClientQuotasRequest) -> Response:
    if not cluster_allowed(ctx, Op.DESCRIBE_CONFIGS):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message="Cluster authorization failed.", entries=None)
    try:
        exact, named = parse_filter(request)
    except KafkaError as exc:
        return Response(error_code=exc.code, error_message=exc.message, entries=None)
    entries = [Response.EntryData(
        entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        values=[Response.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in sorted(ctx.broker.metadata.client_quotas().items(), key=lambda e: repr(e[0]))
        if matches(entity, exact, named, request.strict)]
    return Response(error_code=0, error_message="", entries=entries)  # Kafka's: the field's default, not null


def parse_filter(request: DescribeClientQuotasRequest) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    named: set[str] = set()
    for component in request.components:
        kind = component.entity_type
        if not kind:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in named:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == EXACT:
            if component.match is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif component.match_type == DEFAULT:
            if component.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif component.match_type == SPECIFIED:
            if component.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            named.add(kind)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}")
    if ("ip" in exact or "ip" in named) and ({"user", "client-id"} & (set(exact) | named)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                    "component should not be used with user or clientId filter "
                                                    "component.")
    return exact, named


def matches(entity: QuotaEntity, exact: dict[str, str | None], named: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(named):
        return False
    return (all(kind in names and names[kind] == name for kind, name in exact.items())
            and all(kind in names for kind in named))
