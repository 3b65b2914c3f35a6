"""OffsetDelete (47): drop a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse


@api(47, 0, 0)
async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await ctx.broker.group_coordinator.delete_offsets(request.group_id, wanted)
    return OffsetDeleteResponse(error_code=error, topics=[
        OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=[
            OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=results.get((t.name, p.partition_index), 0))
            for p in t.partitions])
        for t in request.topics])
