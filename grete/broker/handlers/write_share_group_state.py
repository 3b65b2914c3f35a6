"""WriteShareGroupState (85): a share-partition leader writes a share partition's state to its share
coordinator (grete.broker.groups.share_coordinator), answered once the state partition's ISR has it.
v1 adds the delivery-complete count (KIP-1226), which the coordinator derives from the batches."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.share.share_format import ShareKey, StateBatch
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, WriteShareGroupStateRequest, WriteShareGroupStateResponse

Response = WriteShareGroupStateResponse


@api(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def handle(ctx: RequestContext[Groups], request: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    allowed = cluster_allowed(ctx, Op.CLUSTER_ACTION)
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
            if allowed:
                try:
                    await ctx.broker.share_coordinator.write(
                        ShareKey(request.group_id, topic.topic_id, p.partition), p.state_epoch, p.leader_epoch,
                        p.start_offset, [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                         for b in p.state_batches])
                    error = ErrorCode.NONE
                except KafkaError as exc:
                    error, message = exc.code, exc.message
            partitions.append(Response.PartitionResult(partition=p.partition, error_code=error, error_message=message))
        results.append(Response.WriteStateResult(topic_id=topic.topic_id, partitions=partitions))
    return Response(results=results)
