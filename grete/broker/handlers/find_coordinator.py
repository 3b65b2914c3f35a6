"""FindCoordinator (10): the coordinator of a group, a transactional id or a share partition is the
leader of the key's partition of ``__consumer_offsets``, ``__transaction_state`` or
``__share_group_state``.

Each internal topic is created on its first lookup, as Kafka does. v5 only lets the answer carry
TRANSACTION_ABORTABLE, which FindCoordinator never produces. v6 adds key type SHARE (KIP-932): the key
is "groupId:topicId:partition" and it names the share coordinator, which Kafka's share-partition
leaders ask over the inter-broker APIs (Read/WriteShareGroupState); a key not of that form, or key
type SHARE below v6, is INVALID_REQUEST with an empty message, as Kafka 4.3.1 answers."""

from __future__ import annotations

from collections.abc import Awaitable

from grete.broker.groups.transactions import ensure_transaction_state_topic
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.coordinator.share.share_format import parse_coordinator_key
from grete.coordinator.share.share_format import partition_for as share_partition_for
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, FindCoordinatorRequest, FindCoordinatorResponse
from grete.protocol.topics import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC

GROUP, TRANSACTION, SHARE = 0, 1, 2
# Kafka's Errors.INVALID_REQUEST message, which it sends for a key type it does not know.
INVALID_REQUEST_TEXT = ("This most likely occurs because of a request being malformed by the client library or "
                        "the message was sent to an incompatible broker. See the broker logs for more details.")


@api(ApiKey.FIND_COORDINATOR, 0, 6)
async def handle(ctx: RequestContext[Transactions], request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    coordinators = []
    for key in keys:
        error, message, leader = await _check(ctx, request.key_type, key, ctx.version)
        endpoint = ctx.broker.broker_endpoint(leader, ctx.listener) if not error else None
        if not error and endpoint is None:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader} has no {ctx.listener} endpoint"
        coordinators.append(FindCoordinatorResponse.Coordinator(
            key=key, node_id=leader if endpoint else -1, host=endpoint.host if endpoint else "",
            port=endpoint.port if endpoint else -1, error_code=error,
            error_message="" if message is None and ctx.version >= 4 else message))  # Kafka: "" for none
    if ctx.version >= 4:
        return FindCoordinatorResponse(coordinators=coordinators)
    only = coordinators[0]
    return FindCoordinatorResponse(error_code=only.error_code,
                                   error_message=only.error_message, node_id=only.node_id,
                                   host=only.host, port=only.port)


async def _check(ctx: RequestContext[Transactions], key_type: int, key: str, version: int) -> tuple[int, str | None, int]:
    """(error, message, coordinator id): the coordinator is the leader of the key's partition of
    the internal topic."""
    if key_type == GROUP and not allowed(ctx, Op.DESCRIBE, Res.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1
    if key_type == TRANSACTION and not allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1
    if key_type == GROUP:
        if not await _ensured(ctx.broker.ensure_offsets_topic()):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} could not be created", -1
        return _available(ctx, OFFSETS_TOPIC, ctx.broker.group_coordinator.partition_for(key))
    if key_type == TRANSACTION:
        if not await _ensured(ensure_transaction_state_topic(ctx.broker)):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} could not be created", -1
        return _available(ctx, TRANSACTION_STATE_TOPIC, ctx.broker.txn_coordinator.partition_for(key))
    if key_type == SHARE:
        return await _share(ctx, key, version)
    return ErrorCode.INVALID_REQUEST, INVALID_REQUEST_TEXT, -1


async def _share(ctx: RequestContext[Transactions], key: str, version: int) -> tuple[int, str | None, int]:
    """The share coordinator of "groupId:topicId:partition": Kafka asks CLUSTER_ACTION on the cluster
    (only brokers look it up)."""
    if version < 6:
        return ErrorCode.INVALID_REQUEST, "" if version >= 4 else INVALID_REQUEST_TEXT, -1
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, -1
    parsed = parse_coordinator_key(key)
    if parsed is None:
        return ErrorCode.INVALID_REQUEST, "", -1
    if not await _ensured(ctx.broker.ensure_share_state_topic()):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_GROUP_STATE_TOPIC} could not be created", -1
    partitions = ctx.broker.config.get_int("share.coordinator.state.topic.num.partitions")
    return _available(ctx, SHARE_GROUP_STATE_TOPIC, share_partition_for(parsed, partitions))


def _available(ctx: RequestContext[Transactions], topic: str, partition: int) -> tuple[int, str | None, int]:
    """COORDINATOR_NOT_AVAILABLE while the key's internal partition has no leader (its log dir failed,
    or it could not be created, or its leader is down), as Kafka answers: clients back off and ask
    again instead of joining a coordinator that cannot write."""
    return ctx.broker.cluster.coordinator_for(topic, partition)


async def _ensured(creating: Awaitable[object]) -> bool:
    """Whether the internal topic exists (creating it now if needed); False if that failed (e.g. the
    metadata could not be written to a full disk), which Kafka reports as COORDINATOR_NOT_AVAILABLE."""
    try:
        await creating
    except KafkaError:
        return False
    return True
