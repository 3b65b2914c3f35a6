"""AlterClientQuotas (49): set or remove quota values of user, client-id, (user, client-id) and ip
entities, or only check them (``validate_only``). Needs ALTER_CONFIGS on the cluster. Per entity,
Kafka's checks and messages (ClientQuotaControlManager): every failure is INVALID_REQUEST, and an
entity that fails changes nothing."""

from __future__ import annotations

import ipaddress
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.metadata import QuotaEntity, quota_entity
from grete.coordinator.zookeeper import zk_layout as zk
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey

Response = AlterClientQuotasResponse
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


@api(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def handle(ctx: RequestContext[Admin], request: AlterClientQuotasRequest) -> Response:
    allowed = cluster_allowed(ctx, Op.ALTER_CONFIGS)
    results = []
    seen: set[QuotaEntity] = set()
    for entry in request.entries:
        code: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        message: str | None = "Cluster authorization failed."
        if allowed:
            try:
                entity, changes = validate(entry, seen)
                if not request.validate_only and changes:
                    await ctx.broker.metadata.alter_client_quotas(entity, changes)
                code, message = 0, None
            except KafkaError as exc:
                code, message = exc.code, exc.message
        results.append(Response.EntryData(error_code=code, error_message=message, entity=[
            Response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
    return Response(entries=results)


def validate(entry: Any, seen: set[QuotaEntity]) -> tuple[QuotaEntity, dict[str, float | None]]:
    names: dict[str, str | None] = {}
    if not entry.entity:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    for part in entry.entity:
        if part.entity_type in names:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid client quota entity, duplicate entity entry {part.entity_type}")
        if part.entity_type not in ("user", "client-id", "ip"):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_name is not None and not part.entity_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {part.entity_type} not supported")
        names[part.entity_type] = part.entity_name
    entity = quota_entity(names)
    if entity in seen:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {_describe(names)}")
    seen.add(entity)
    if "ip" in names:
        if len(names) > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                                                        "not be combined with User or ClientId")
        if not _valid_ip(names["ip"]):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{names['ip']} is not a valid IP or resolvable host.")
        keys = zk.IP_QUOTA_KEYS
    else:
        keys = zk.QUOTA_KEYS
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate quota key {op.key} not updating quota for "
                                                        f"this entity {_describe(names)}")
        if op.remove:
            changes[op.key] = None
            continue
        _check_value(keys, op.key, op.value)
        changes[op.key] = op.value
    return entity, changes


def _check_value(keys: frozenset[str], key: str, value: float) -> None:
    if key not in keys:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if key in zk.QUOTA_INTEGER_KEYS:
        integral = "INT" if key == "connection_creation_rate" else "LONG"
        if value > (INT_MAX if integral == "INT" else LONG_MAX):
            article = "an" if integral == "INT" else "a"
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {article} {integral}.")
        if abs(value % 1.0) > 1e-6:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _valid_ip(ip: str | None) -> bool:
    if ip is None:
        return True
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return False  # Kafka would also try to resolve a host name; grete takes addresses only
    return True


def _describe(names: dict[str, str | None]) -> str:
    """Kafka's ClientQuotaEntity.toString."""
    return "ClientQuotaEntity(entries=" + "{" + ", ".join(f"{k}={v}" for k, v in names.items()) + "})"
