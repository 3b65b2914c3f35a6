"""DeleteTopics (20): v1-6; v6 names topics by name or by topic id.

Follows Kafka's controller: duplicates answer INVALID_REQUEST and are not deleted, unknown names
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID, and ``delete.topic.enable=false``
TOPIC_DELETION_DISABLED for every topic (INVALID_REQUEST before v3, which lacks that code).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from grete.broker.quotas.client_quotas import MutationQuota, throttle_for_mutations
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DeleteTopicsRequest, DeleteTopicsResponse

T = TypeVar("T")
# Kafka's default messages (Errors.message()) for errors raised without one.
DEFAULT_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
}
Result = DeleteTopicsResponse.DeletableTopicResult
STRICT_QUOTA_SINCE = 5


@api(ApiKey.DELETE_TOPICS, 0, 6, advertised_min=1)
async def handle(ctx: RequestContext[Admin], request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    results: list[Result] = []
    names, ids = _requested(ctx, request, results)
    # KIP-599: v5+ clients know THROTTLING_QUOTA_EXCEEDED; older ones are throttled afterwards.
    quota = ctx.broker.quotas.mutations(ctx, strict=ctx.version >= STRICT_QUOTA_SINCE)
    if not ctx.broker.config.get_bool("delete.topic.enable"):
        code = ErrorCode.TOPIC_DELETION_DISABLED if ctx.version >= 3 else ErrorCode.INVALID_REQUEST
        error = KafkaError(code, "Topic deletion is disabled.")
        results += [_result(name, ZERO_UUID, error) for name in names]
        results += [_result(None, topic_id, error) for topic_id in ids]
        return DeleteTopicsResponse(responses=results)
    for topic_id in ids:
        meta = ctx.broker.metadata.topic_by_id(topic_id)
        if meta is None:
            results.append(_result(None, topic_id, KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)))
        else:
            results.append(await _delete(ctx, meta.name, topic_id, quota))
    for name in names:
        found = ctx.broker.topic_id_for(name)
        if found is None and not allowed(ctx, Op.DELETE, Res.TOPIC, name):
            # Refused before the existence check, as Kafka does.
            results.append(_result(name, ZERO_UUID, KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                               "Authorization failed.")))
        elif found is None:
            results.append(_result(name, ZERO_UUID, KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
        elif found in ids:
            results.append(_result(name, found, KafkaError(
                ErrorCode.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied.")))
        else:
            results.append(await _delete(ctx, name, found, quota))
    response = DeleteTopicsResponse(responses=results)
    throttle_for_mutations(ctx, response, quota)
    return response


def _requested(ctx: RequestContext[Admin], request: DeleteTopicsRequest,
               results: list[Result]) -> tuple[list[str], list[uuid.UUID]]:
    """Names and ids to delete, each once; malformed or duplicated entries answered in ``results``."""
    named: list[str] = list(request.topic_names) if ctx.version < 6 else []
    by_id: list[uuid.UUID] = []
    for state in request.topics if ctx.version >= 6 else []:
        if state.name is None and state.topic_id == ZERO_UUID:
            results.append(_result(None, ZERO_UUID, KafkaError(
                ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")))
        elif state.name is not None and state.topic_id != ZERO_UUID:
            results.append(_result(state.name, state.topic_id, KafkaError(
                ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id.")))
        elif state.name is not None:
            named.append(state.name)
        else:
            by_id.append(state.topic_id)
    names = _unique(named, lambda n: results.append(_result(n, ZERO_UUID, KafkaError(
        ErrorCode.INVALID_REQUEST, "Duplicate topic name."))))
    ids = _unique(by_id, lambda i: results.append(_result(None, i, KafkaError(
        ErrorCode.INVALID_REQUEST, "Duplicate topic id."))))
    return names, ids


def _unique(items: list[T], on_duplicate: Callable[[T], object]) -> list[T]:
    counts = Counter(items)
    for item, count in counts.items():
        if count > 1:
            on_duplicate(item)
    return [item for item, count in counts.items() if count == 1]


async def _delete(ctx: RequestContext[Admin], name: str, topic_id: uuid.UUID, quota: MutationQuota) -> Result:
    try:
        if not allowed(ctx, Op.DELETE, Res.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        meta = ctx.broker.metadata.topic(name)
        quota.record(len(meta.partitions) if meta is not None else 0)
        await ctx.broker.delete_topic(name)
    except KafkaError as exc:
        return _result(name, topic_id, exc)
    return _result(name, topic_id, None)


def _result(name: str | None, topic_id: uuid.UUID, error: KafkaError | None) -> Result:
    if error is None:
        return Result(name=name, topic_id=topic_id, error_code=0, error_message=None)
    message = error.message or DEFAULT_MESSAGES.get(error.code)
    return Result(name=name, topic_id=topic_id, error_code=error.code, error_message=message)
