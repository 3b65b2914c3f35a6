"""ElectLeaders (43): on one node every partition's leader is its preferred replica and sits in the
ISR, so no election is ever needed: named partitions answer ELECTION_NOT_NEEDED, and an election of
all partitions (null list) answers nothing, as Kafka's controller does for partitions it skips."""

from __future__ import annotations

from grete.broker.authz import Op, cluster_allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ElectLeadersRequest, ElectLeadersResponse

Result = ElectLeadersResponse.ReplicaElectionResult


@api(43, 0, 2)
def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    results = []
    if not cluster_allowed(ctx, Op.ALTER):
        return ElectLeadersResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, replica_election_results=[
            Result(topic=w.topic, partition_result=[ElectLeadersResponse.PartitionResult(
                partition_id=i, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
                for i in w.partitions]) for w in request.topic_partitions or []])
    for wanted in request.topic_partitions or []:
        partitions = []
        for index in wanted.partitions:
            known = (wanted.topic, index) in ctx.broker.partitions
            partitions.append(ElectLeadersResponse.PartitionResult(
                partition_id=index,
                error_code=ErrorCode.ELECTION_NOT_NEEDED if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=None if known else "The partition does not exist."))
        results.append(Result(topic=wanted.topic, partition_result=partitions))
    return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)
