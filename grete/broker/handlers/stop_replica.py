"""StopReplica (5), from the controller of a ZooKeeper cluster: stop serving partitions, and delete
them when their topic is being deleted (Kafka's ReplicaManager.stopReplicas)."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, StopReplicaRequest, StopReplicaResponse


@api(ApiKey.STOP_REPLICA, 3, 4)
def handle(ctx: RequestContext[DataPlane], request: StopReplicaRequest) -> StopReplicaResponse:
    broker = ctx.broker
    cluster = broker.cluster
    assert isinstance(cluster, ZkBroker)
    if request.broker_epoch != -1 and request.broker_epoch < cluster.broker_epoch:
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if not broker.replicas.check_controller_epoch(request.controller_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    errors = []
    for topic in request.topic_states:
        for p in topic.partition_states:
            code = broker.replicas.stop_replica(topic.topic_name, p.partition_index, p.leader_epoch,
                                                p.delete_partition)
            errors.append(StopReplicaResponse.StopReplicaPartitionError(
                topic_name=topic.topic_name, partition_index=p.partition_index, error_code=code))
    return StopReplicaResponse(error_code=0, partition_errors=errors)
