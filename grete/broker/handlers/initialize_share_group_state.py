"""InitializeShareGroupState (83): a share partition's first state (state epoch and start offset, nothing
in flight), written by its share coordinator (grete.broker.groups.share_coordinator)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.share.share_format import ShareKey
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    ApiKey,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)

Response = InitializeShareGroupStateResponse


@api(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def handle(ctx: RequestContext[Groups], request: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    allowed = cluster_allowed(ctx, Op.CLUSTER_ACTION)
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
            if allowed:
                try:
                    await ctx.broker.share_coordinator.initialize(
                        ShareKey(request.group_id, topic.topic_id, p.partition), p.state_epoch, p.start_offset)
                    error = ErrorCode.NONE
                except KafkaError as exc:
                    error, message = exc.code, exc.message
            partitions.append(Response.PartitionResult(partition=p.partition, error_code=error, error_message=message))
        results.append(Response.InitializeStateResult(topic_id=topic.topic_id, partitions=partitions))
    return Response(results=results)
