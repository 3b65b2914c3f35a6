"""ElectLeaders (43). In a cluster the controller elects (preferred: the first assigned replica if
live and in the ISR; unclean: any live replica for a partition without a leader), and answers
each named partition with NONE, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE or NOT_CONTROLLER. On one node every partition's leader is its
preferred replica and sits in the ISR, so no election is ever needed: named partitions answer
ELECTION_NOT_NEEDED. An election of all partitions (null list) answers only the partitions it
elected, as Kafka's controller does."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ElectLeadersRequest, ElectLeadersResponse

Result = ElectLeadersResponse.ReplicaElectionResult
PREFERRED = 0
# Kafka 3.9's ZooKeeper controller's messages (its election strategies').
ZK_MESSAGES = {
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "Failed to elect leader for partition under strategy "
                                              "PreferredReplicaPartitionLeaderElectionStrategy",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Failed to elect leader for partition under strategy "
                                              "OfflinePartitionLeaderElectionStrategy",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
}
# A KRaft controller's (Kafka 4.3.1's ReplicationControlManager: the error's own message); an unknown
# topic or partition is named.
KRAFT_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


@api(ApiKey.ELECT_LEADERS, 0, 2)
def handle(ctx: RequestContext[Admin],
           request: ElectLeadersRequest) -> ElectLeadersResponse | Coroutine[Any, Any, ElectLeadersResponse]:
    if not cluster_allowed(ctx, Op.ALTER):
        return ElectLeadersResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, replica_election_results=[
            Result(topic=w.topic, partition_result=[ElectLeadersResponse.PartitionResult(
                partition_id=i, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
                for i in w.partitions]) for w in request.topic_partitions or []])
    return _elect(ctx, request)


async def _elect(ctx: RequestContext[Admin], request: ElectLeadersRequest) -> ElectLeadersResponse:
    preferred = ctx.version == 0 or request.election_type == PREFERRED
    wanted = (None if request.topic_partitions is None
              else [(w.topic, i) for w in request.topic_partitions for i in w.partitions])
    try:
        outcome = await ctx.broker.cluster.elect_leaders(preferred, wanted)
    except KafkaError as exc:  # NOT_CONTROLLER from a voter that does not lead, or the controller's refusal
        return ElectLeadersResponse(error_code=exc.code, replica_election_results=[])
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, index), code in outcome.items():
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=index, error_code=code, error_message=_message(ctx, topic, index, code)))
    return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=[
        Result(topic=topic, partition_result=results) for topic, results in by_topic.items()])


def _message(ctx: RequestContext[Admin], topic: str, index: int, code: ErrorCode) -> str | None:
    if ctx.broker.cluster.zk_broker_apis:
        return ZK_MESSAGES.get(code)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return (f"No such topic as {topic}" if ctx.broker.metadata.topic(topic) is None
                else f"No such partition as {topic}-{index}")
    return KRAFT_MESSAGES.get(code)
