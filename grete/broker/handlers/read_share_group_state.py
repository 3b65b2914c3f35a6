"""ReadShareGroupState (84): a new share-partition leader reads the state it starts from (its share
coordinator: grete.broker.groups.share_coordinator). A share partition never initialized answers start
offset -1 and state epoch 0; an older leader epoch than the coordinator has seen is FENCED_LEADER_EPOCH."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, cluster_allowed
from grete.coordinator.share.share_format import ShareKey
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ReadShareGroupStateRequest, ReadShareGroupStateResponse

Response = ReadShareGroupStateResponse


@api(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
def handle(ctx: RequestContext[Groups], request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    allowed = cluster_allowed(ctx, Op.CLUSTER_ACTION)
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            row = Response.PartitionResult(partition=p.partition, start_offset=-1,
                                           error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            if allowed:
                try:
                    state = ctx.broker.share_coordinator.read(ShareKey(request.group_id, topic.topic_id, p.partition),
                                                              p.leader_epoch)
                    row.error_code = ErrorCode.NONE
                    if state is not None:
                        row.state_epoch, row.start_offset = state.state_epoch, state.start_offset
                        row.state_batches = [Response.StateBatch(
                            first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.delivery_state,
                            delivery_count=b.delivery_count) for b in state.batches]
                except KafkaError as exc:
                    row.error_code, row.error_message = exc.code, exc.message
            partitions.append(row)
        results.append(Response.ReadStateResult(topic_id=topic.topic_id, partitions=partitions))
    return Response(results=results)
