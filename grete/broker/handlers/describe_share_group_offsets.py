"""DescribeShareGroupOffsets (90): each share partition's start offset (SPSO); -1 where the group has
no state for a partition, as Kafka 4.3.1 answers. Topics null: every share partition of the group.

v1 adds the lag (KIP-1226): the high watermark less the SPSO less the records past it whose delivery
is complete (acknowledged or archived); -1 where there is no state or this node does not host the
partition. In a cluster the state comes from the share coordinators (ReadShareGroupStateSummary)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiKey,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)

Request = DescribeShareGroupOffsetsRequest
Response = DescribeShareGroupOffsetsResponse


@api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def handle(ctx: RequestContext[Groups], request: Request) -> Response:
    return Response(groups=[await _group(ctx, g) for g in request.groups])


async def _group(ctx: RequestContext[Groups], wanted: Request.DescribeShareGroupOffsetsRequestGroup
                 ) -> Response.DescribeShareGroupOffsetsResponseGroup:
    group_id = wanted.group_id
    if not allowed(ctx, Op.DESCRIBE, Res.GROUP, group_id):
        return Response.DescribeShareGroupOffsetsResponseGroup(group_id=group_id,
                                                               error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    shares, metadata = ctx.broker.share_groups, ctx.broker.metadata
    status = shares.coordinator_error(group_id)
    if status is not None:
        return Response.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, error_code=status)
    asked_keys = None if wanted.topics is None else [
        (meta.topic_id, index) for t in wanted.topics if (meta := metadata.topic(t.topic_name)) is not None
        and allowed(ctx, Op.DESCRIBE, Res.TOPIC, t.topic_name) for index in t.partitions if index in meta.partitions]
    offsets = await shares.described(group_id, asked_keys)
    if wanted.topics is None:
        by_name: dict[str, list[int]] = {}
        for topic_id, index in sorted(offsets):
            meta = metadata.topic_by_id(topic_id)
            if meta is not None:
                by_name.setdefault(meta.name, []).append(index)
        asked = sorted(by_name.items())
    else:
        asked = [(t.topic_name, list(t.partitions)) for t in wanted.topics]
    topics = []
    for name, indexes in asked:
        meta = metadata.topic(name)
        readable = meta is not None and allowed(ctx, Op.DESCRIBE, Res.TOPIC, name)
        rows = []
        for index in indexes:
            if not readable or meta is None or index not in meta.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if readable or meta is None else \
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED
                rows.append(Response.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=index, start_offset=-1, leader_epoch=-1, error_code=code))
                continue
            start, complete = offsets.get((meta.topic_id, index), (-1, 0))
            rows.append(Response.DescribeShareGroupOffsetsResponsePartition(
                partition_index=index, start_offset=start, leader_epoch=_leader_epoch(ctx, name, index),
                lag=await _lag(ctx, name, index, start, complete)))
        topics.append(Response.DescribeShareGroupOffsetsResponseTopic(
            topic_name=name, topic_id=meta.topic_id if meta is not None else Response.DescribeShareGroupOffsetsResponseTopic().topic_id,
            partitions=rows))
    return Response.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=topics)


def _leader_epoch(ctx: RequestContext[Groups], topic: str, index: int) -> int:
    partition = ctx.broker.partitions.get((topic, index))
    return partition.leader_epoch if partition is not None else 0


async def _lag(ctx: RequestContext[Groups], topic: str, index: int, start: int, complete: int) -> int:
    end = await ctx.broker.share_groups.end_offset(topic, index) if start >= 0 else None
    return -1 if end is None else max(0, end - start - complete)
