"""AlterPartitionReassignments (45) with Kafka's validation. In a cluster the controller starts the
reassignment (new replicas join and catch up, then the target becomes the replica set and the rest
are deleted) or cancels it; other brokers answer NOT_CONTROLLER, as Kafka's ZooKeeper-mode brokers
do; a KRaft broker forwards the request to its active controller. On one node the only valid target is the current replica list (this broker), which completes at
once; cancelling finds nothing to cancel."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ApiKey,
)

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
def handle(ctx: RequestContext[Admin], request: AlterPartitionReassignmentsRequest
           ) -> AlterPartitionReassignmentsResponse | Coroutine[Any, Any, AlterPartitionReassignmentsResponse]:
    if not cluster_allowed(ctx, Op.ALTER):
        return _refused(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return _reassign(ctx, request)


def _refused(request: AlterPartitionReassignmentsRequest, code: ErrorCode) -> AlterPartitionReassignmentsResponse:
    """Kafka's error response (AlterPartitionReassignmentsRequest.getErrorResponse): the error at the
    top and again on every partition asked about (compat-tests/security's matrix, Kafka 4.3.1)."""
    topics = [TopicResponse(name=t.name, partitions=[PartitionResponse(partition_index=p.partition_index,
                                                                       error_code=code, error_message=None)
                                                     for p in t.partitions]) for t in request.topics]
    return AlterPartitionReassignmentsResponse(error_code=code, error_message=None, responses=topics)


async def _reassign(ctx: RequestContext[Admin],
                    request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    wanted = {(t.name, p.partition_index): list(p.replicas) if p.replicas is not None else None
              for t in request.topics for p in t.partitions}
    try:
        forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)  # a KRaft broker's controller answers
        if isinstance(forwarded, AlterPartitionReassignmentsResponse):
            return forwarded
        outcome = await ctx.broker.cluster.reassign(wanted)
    except KafkaError as exc:  # NOT_CONTROLLER: this broker is not the one to ask
        return AlterPartitionReassignmentsResponse(error_code=exc.code, error_message=exc.message, responses=[])
    topics = [TopicResponse(name=t.name, partitions=[
        PartitionResponse(partition_index=p.partition_index, error_code=outcome[(t.name, p.partition_index)][0],
                          error_message=outcome[(t.name, p.partition_index)][1]) for p in t.partitions])
        for t in request.topics]
    # A KRaft controller answers a null message (Kafka 4.3.1's), a ZooKeeper-mode broker an empty one (3.9's).
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE,
                                               error_message="" if ctx.broker.cluster.zk_broker_apis else None,
                                               responses=topics)

