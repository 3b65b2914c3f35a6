"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8+); -1 where none. From v9 a
KIP-848 member names itself and its epoch (UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH otherwise); v10
names topics by id. v0, which a broker of a ZooKeeper cluster serves as Kafka 3.9's does (Kafka 4
removed it, KIP-896), reads the offsets OffsetCommit v0 keeps in ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Coroutine
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, OffsetFetchRequest, OffsetFetchResponse

Partitions = list[tuple[str, int]] | None


@api(ApiKey.OFFSET_FETCH, 0, 10, advertised_min=1)
def handle(ctx: RequestContext[Groups],
           request: OffsetFetchRequest) -> OffsetFetchResponse | Coroutine[Any, Any, OffsetFetchResponse]:
    if ctx.version == 0:
        return _from_zookeeper(ctx, request)
    if ctx.version >= 8:
        groups = []
        for group in request.groups:
            unknown = _names_from_ids(ctx, group) if ctx.version >= 10 else []
            wanted = (None if group.topics is None else
                      [(t.name, p) for t in group.topics if t not in unknown for p in t.partition_indexes])
            stale = (ctx.broker.group_coordinator.validate_offset_fetch(group.group_id, group.member_id,
                                                                         group.member_epoch)
                     if ctx.version >= 9 and allowed(ctx, Op.DESCRIBE, Res.GROUP, group.group_id) else None)
            error, topics = (stale, {}) if stale is not None else _fetch(ctx, group.group_id, wanted,
                                                                         request.require_stable)
            if error == ErrorCode.NONE:
                for t in unknown:
                    topics[t.name] = [(p, _UnknownId()) for p in t.partition_indexes]
            ids = {t.name: t.topic_id for t in group.topics or ()}
            groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=group.group_id, error_code=error, topics=[
                    OffsetFetchResponse.OffsetFetchResponseTopics(
                        name=name, topic_id=ids.get(name) or _topic_id(ctx, name), partitions=[
                            OffsetFetchResponse.OffsetFetchResponsePartitions(
                                partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                                metadata=o.metadata, error_code=o.error) for p, o in parts])
                    for name, parts in topics.items()]))
        return OffsetFetchResponse(groups=groups)
    wanted = None if request.topics is None else [(t.name, p) for t in request.topics
                                                    for p in t.partition_indexes]
    error, topics = _fetch(ctx, request.group_id, wanted, request.require_stable)
    return OffsetFetchResponse(error_code=error, topics=[
        OffsetFetchResponse.OffsetFetchResponseTopic(name=name, partitions=[
            OffsetFetchResponse.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                metadata=o.metadata, error_code=o.error if ctx.version >= 2 or not error else error)
            for p, o in parts])
        for name, parts in topics.items()])


async def _from_zookeeper(ctx: RequestContext[Groups], request: OffsetFetchRequest) -> OffsetFetchResponse:
    """v0: the group's offsets in ZooKeeper; where none is kept or the partition is unknown, offset -1
    with UNKNOWN_TOPIC_OR_PARTITION, as Kafka 3.9 answers (its UNKNOWN_PARTITION)."""
    group_allowed = allowed(ctx, Op.DESCRIBE, Res.GROUP, request.group_id)
    topics = []
    for topic in request.topics or []:
        meta = ctx.broker.metadata.topic(topic.name)
        error = (ErrorCode.GROUP_AUTHORIZATION_FAILED if not group_allowed else
                 ErrorCode.TOPIC_AUTHORIZATION_FAILED if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic.name)
                 else ErrorCode.NONE)
        partitions = []
        for index in topic.partition_indexes:
            found = None
            if error == ErrorCode.NONE and meta is not None and index in meta.partitions:
                found = await ctx.broker.cluster.zookeeper_offset(request.group_id, topic.name, index)
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if error == ErrorCode.NONE and found is None else error
            partitions.append(OffsetFetchResponse.OffsetFetchResponsePartition(
                partition_index=index, committed_offset=-1 if found is None else found, metadata="",
                error_code=code))
        topics.append(OffsetFetchResponse.OffsetFetchResponseTopic(name=topic.name, partitions=partitions))
    return OffsetFetchResponse(topics=topics)


def _fetch(ctx: RequestContext[Groups], group_id: str, wanted: Partitions,
           require_stable: bool) -> tuple[int, dict[str, list[tuple[int, Any]]]]:
    if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    denied: set[str] = set()
    named: list[tuple[str, int]] = []
    if ctx.broker.authorizer is not None:
        names = {t for t, _ in wanted} if wanted is not None else set()
        denied = {t for t in names if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, t)}
    named = list(wanted or [])
    if denied:
        wanted = [(t, p) for t, p in named if t not in denied]
    error, offsets = ctx.broker.group_coordinator.fetch_offsets(group_id, wanted, require_stable)
    topics: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), found in sorted(offsets.items()):
        if ctx.broker.authorizer is not None and topic not in denied \
                and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic):
            continue  # all-topics fetch: topics the principal may not describe are left out
        topics.setdefault(topic, []).append((partition, found))
    for topic, partition in sorted(named):
        if topic in denied:
            topics.setdefault(topic, []).append((partition, _Refused()))
    return error, topics


class _Refused:
    """A partition of a topic the principal may not describe: Kafka's TOPIC_AUTHORIZATION_FAILED entry."""

    offset = -1
    leader_epoch = -1
    metadata = ""
    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class _UnknownId(_Refused):
    """A partition of a topic id the broker does not know (v10): Kafka 4.3.1's UNKNOWN_TOPIC_ID entry."""

    error = ErrorCode.UNKNOWN_TOPIC_ID


def _names_from_ids(ctx: RequestContext[Groups], group: OffsetFetchRequest.OffsetFetchRequestGroup
                    ) -> list[OffsetFetchRequest.OffsetFetchRequestTopics]:
    """v10 names topics by id: fill in the names; the topics whose id is unknown are returned."""
    unknown = []
    for topic in group.topics or ():
        meta = ctx.broker.metadata.topic_by_id(topic.topic_id)
        topic.name = meta.name if meta is not None else f"\0{topic.topic_id}"
        if meta is None:
            unknown.append(topic)
    return unknown


def _topic_id(ctx: RequestContext[Groups], name: str) -> uuid.UUID:
    meta = ctx.broker.metadata.topic(name)
    return meta.topic_id if meta is not None else ZERO_UUID
