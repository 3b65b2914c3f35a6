"""OffsetCommit (8): group commits (generation and member checked) and simple commits
(generation -1, empty member id), stored in ``__consumer_offsets``."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.coordinator.group_types import OffsetCommit
from grete.protocol.messages import OffsetCommitRequest, OffsetCommitResponse


@api(8, 2, 8)
async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    commits = [OffsetCommit(topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata)
               for topic in request.topics for p in topic.partitions]
    errors = await ctx.broker.group_coordinator.commit_offsets(
        group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id, group_instance_id=request.group_instance_id,
        retention_ms=request.retention_time_ms, offsets=commits)
    return OffsetCommitResponse(topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions])
        for topic in request.topics])
