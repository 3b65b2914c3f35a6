"""FindCoordinator (10): this node coordinates every group and every transactional id.

The offsets topic is created on the first group lookup, and ``__transaction_state`` on the first
transactional-id lookup, as Kafka does. v5 only lets the answer carry TRANSACTION_ABORTABLE, which
FindCoordinator never produces; v6 (share-group coordinators, key type SHARE) is not advertised:
grete has no share groups. Key type SHARE below v6 is INVALID_REQUEST, as Kafka answers it."""

from __future__ import annotations

from collections.abc import Awaitable

from grete.broker.authz import Op, Res, allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.broker.transactions import ensure_transaction_state_topic
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from grete.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

GROUP, TRANSACTION = 0, 1


@api(10, 0, 5)
async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    coordinators = []
    for key in keys:
        error, message, leader = await _check(ctx, request.key_type, key)
        endpoint = ctx.broker.broker_endpoint(leader, ctx.listener) if not error else None
        if not error and endpoint is None:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader} has no {ctx.listener} endpoint"
        coordinators.append(FindCoordinatorResponse.Coordinator(
            key=key, node_id=leader if endpoint else -1, host=endpoint.host if endpoint else "",
            port=endpoint.port if endpoint else -1, error_code=error, error_message=message))
    if ctx.version >= 4:
        return FindCoordinatorResponse(coordinators=coordinators)
    only = coordinators[0]
    return FindCoordinatorResponse(error_code=only.error_code,
                                   error_message=only.error_message, node_id=only.node_id,
                                   host=only.host, port=only.port)


async def _check(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str | None, int]:
    """(error, message, coordinator id): the coordinator is the leader of the key's partition of
    the internal topic."""
    if key_type == GROUP and not allowed(ctx, Op.DESCRIBE, Res.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1
    if key_type == TRANSACTION and not allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1
    if key_type == GROUP:
        if not key:
            return ErrorCode.INVALID_REQUEST, "group id must not be empty", -1
        if not await _ensured(ctx.broker.ensure_offsets_topic()):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} could not be created", -1
        return _available(ctx, OFFSETS_TOPIC, ctx.broker.group_coordinator.partition_for(key))
    if key_type == TRANSACTION:
        if not key:
            return ErrorCode.INVALID_REQUEST, "transactional id must not be empty", -1
        if not await _ensured(ensure_transaction_state_topic(ctx.broker)):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} could not be created", -1
        return _available(ctx, TRANSACTION_STATE_TOPIC, ctx.broker.txn_coordinator.partition_for(key))
    return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1


def _available(ctx: RequestContext, topic: str, partition: int) -> tuple[int, str | None, int]:
    """COORDINATOR_NOT_AVAILABLE while the key's internal partition has no leader (its log dir failed,
    or it could not be created, or its leader is down), as Kafka answers: clients back off and ask
    again instead of joining a coordinator that cannot write."""
    broker = ctx.broker
    if broker.cluster is not None:
        meta = broker.metadata.topic(topic)
        leader = meta.partitions[partition].leader if meta is not None and partition in meta.partitions else -1
        if leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic}-{partition} has no leader", -1
        return 0, None, leader
    if broker.replicas.is_offline(topic, partition) or (topic, partition) not in broker.partitions:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the coordinator's partition {topic}-{partition} is offline", -1
    return 0, None, broker.node_id


async def _ensured(creating: Awaitable[object]) -> bool:
    """Whether the internal topic exists (creating it now if needed); False if that failed (e.g. the
    metadata could not be written to a full disk), which Kafka reports as COORDINATOR_NOT_AVAILABLE."""
    try:
        await creating
    except KafkaError:
        return False
    return True
