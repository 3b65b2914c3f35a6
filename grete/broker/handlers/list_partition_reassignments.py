"""ListPartitionReassignments (46): the controller's reassignments in progress (replicas, adding,
removing), all or those asked for; other ZooKeeper-mode brokers answer NOT_CONTROLLER, a KRaft broker
asks its active controller. A single node never has one in progress."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    ApiKey,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def handle(ctx: RequestContext[Admin], request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    try:
        forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)  # a KRaft broker's controller answers
        if isinstance(forwarded, ListPartitionReassignmentsResponse):
            return forwarded
        ongoing = ctx.broker.cluster.reassignments()
    except KafkaError as exc:  # NOT_CONTROLLER: this broker is not the one to ask
        return ListPartitionReassignmentsResponse(error_code=exc.code, error_message=exc.message, topics=[])
    wanted = (None if request.topics is None
              else {(t.name, p) for t in request.topics for p in t.partition_indexes})
    by_topic: dict[str, list[Ongoing]] = {}
    for (topic, index), (replicas, adding, removing) in sorted(ongoing.items()):
        if wanted is None or (topic, index) in wanted:
            by_topic.setdefault(topic, []).append(Ongoing(partition_index=index, replicas=replicas,
                                                          adding_replicas=adding, removing_replicas=removing))
    # A KRaft controller answers a null message (Kafka 4.3.1's), a ZooKeeper-mode broker an empty one (3.9's).
    return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE,
                                              error_message="" if ctx.broker.cluster.zk_broker_apis else None, topics=[
        ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])


Ongoing = ListPartitionReassignmentsResponse.OngoingPartitionReassignment
