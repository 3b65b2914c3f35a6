"""OffsetDelete (47): drop a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, OffsetDeleteRequest, OffsetDeleteResponse


@api(ApiKey.OFFSET_DELETE, 0, 0)
async def handle(ctx: RequestContext[Groups], request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not allowed(ctx, Op.DELETE, Res.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
    if ctx.broker.share_groups.holds(request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND, topics=[])
    denied = {t.name for t in request.topics if not allowed(ctx, Op.READ, Res.TOPIC, t.name)}
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name not in denied]
    error, found = await ctx.broker.group_coordinator.delete_offsets(request.group_id, wanted)
    results: dict[tuple[str, int], int] = dict(found)
    results.update({(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    for t in request.topics if t.name in denied for p in t.partitions})
    return OffsetDeleteResponse(error_code=error, topics=[
        OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=[
            OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=results.get((t.name, p.partition_index), 0))
            for p in t.partitions])
        for t in request.topics])
