"""ReadShareGroupStateSummary (87): a share partition's start offset, state and leader epochs, and (v1,
KIP-1226) how many records past the start offset are Acknowledged or Archived; start offset -1 for
one never initialized."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.share.share_format import ShareKey
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    ApiKey,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)

Response = ReadShareGroupStateSummaryResponse


@api(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
def handle(ctx: RequestContext[Groups], request: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    allowed = cluster_allowed(ctx, Op.CLUSTER_ACTION)
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            row = Response.PartitionResult(partition=p.partition, start_offset=-1, leader_epoch=-1,
                                           error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            if allowed:
                try:
                    summary = ctx.broker.share_coordinator.summary(ShareKey(request.group_id, topic.topic_id,
                                                                            p.partition))
                    row.error_code = ErrorCode.NONE
                    if summary is not None:
                        row.state_epoch, row.leader_epoch = summary.state_epoch, summary.leader_epoch
                        row.start_offset = summary.start_offset
                        row.delivery_complete_count = summary.delivery_complete_count
                except KafkaError as exc:
                    row.error_code, row.error_message = exc.code, exc.message
            partitions.append(row)
        results.append(Response.ReadStateSummaryResult(topic_id=topic.topic_id, partitions=partitions))
    return Response(results=results)
