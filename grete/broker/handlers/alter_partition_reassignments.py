"""AlterPartitionReassignments (45) with Kafka's validation. On one node the only valid target is
the current replica list (this broker), which completes at once; cancelling finds nothing to cancel."""

from __future__ import annotations

from grete.broker.authz import Op, cluster_allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


@api(45, 0, 1)
def handle(ctx: RequestContext,
           request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    if not cluster_allowed(ctx, Op.ALTER):
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                   error_message=None, responses=[])
    topics = [TopicResponse(name=t.name, partitions=[_one(ctx, t.name, p) for p in t.partitions])
              for t in request.topics]
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, responses=topics)


def _one(ctx: RequestContext, topic: str,
         wanted: AlterPartitionReassignmentsRequest.ReassignablePartition) -> PartitionResponse:
    def answer(code: ErrorCode, message: str | None = None) -> PartitionResponse:
        return PartitionResponse(partition_index=wanted.partition_index, error_code=code, error_message=message)

    if (topic, wanted.partition_index) not in ctx.broker.partitions:
        return answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    replicas = wanted.replicas
    if replicas is None:
        return answer(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No ongoing reassignment for this partition.")
    if not replicas:
        return answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list cannot be empty.")
    if len(set(replicas)) != len(replicas):
        return answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list contains duplicates.")
    unknown = [r for r in replicas if r != ctx.broker.node_id]
    if unknown:
        return answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                      f"The manual partition assignment includes broker(s) {unknown} that are not registered.")
    return answer(ErrorCode.NONE)
