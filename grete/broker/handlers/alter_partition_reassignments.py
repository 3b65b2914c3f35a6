"""AlterPartitionReassignments (45) with Kafka's validation. In a cluster the controller starts the
reassignment (new replicas join and catch up, then the target becomes the replica set and the rest
are deleted) or cancels it; other brokers answer NOT_CONTROLLER, as Kafka's ZooKeeper-mode brokers
do. On one node the only valid target is the current replica list (this broker), which completes at
once; cancelling finds nothing to cancel."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from grete.broker.authz import Op, cluster_allowed
from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


@api(45, 0, 1)
def handle(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
           ) -> AlterPartitionReassignmentsResponse | Coroutine[Any, Any, AlterPartitionReassignmentsResponse]:
    if not cluster_allowed(ctx, Op.ALTER):
        return _refused(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if ctx.broker.cluster is not None:
        return _in_cluster(ctx, request)
    topics = [TopicResponse(name=t.name, partitions=[_one(ctx, t.name, p) for p in t.partitions])
              for t in request.topics]
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, responses=topics)


def _refused(request: AlterPartitionReassignmentsRequest, code: ErrorCode) -> AlterPartitionReassignmentsResponse:
    """Kafka's error response (AlterPartitionReassignmentsRequest.getErrorResponse): the error at the
    top and again on every partition asked about (compat-tests/security's matrix, Kafka 4.3.1)."""
    topics = [TopicResponse(name=t.name, partitions=[PartitionResponse(partition_index=p.partition_index,
                                                                       error_code=code, error_message=None)
                                                     for p in t.partitions]) for t in request.topics]
    return AlterPartitionReassignmentsResponse(error_code=code, error_message=None, responses=topics)


async def _in_cluster(ctx: RequestContext,
                      request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    cluster = ctx.broker.cluster
    assert isinstance(cluster, ZkBroker)
    if not cluster.controller.active:
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                                   error_message="This is not the correct controller for this cluster.",
                                                   responses=[])
    targets: dict[tuple[str, int], list[int] | None] = {}
    refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
    for topic in request.topics:
        for wanted in topic.partitions:
            tp = (topic.name, wanted.partition_index)
            replicas = wanted.replicas
            if replicas is not None and not replicas:
                refused[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list cannot be empty.")
            elif replicas is not None and len(set(replicas)) != len(replicas):
                refused[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list contains duplicates.")
            else:
                targets[tp] = list(replicas) if replicas is not None else None
    outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {**refused}
    outcome.update(await cluster.controller.reassign(targets) if targets else {})
    topics = [TopicResponse(name=t.name, partitions=[
        PartitionResponse(partition_index=p.partition_index, error_code=outcome[(t.name, p.partition_index)][0],
                          error_message=outcome[(t.name, p.partition_index)][1]) for p in t.partitions])
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
