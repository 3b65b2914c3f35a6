"""AlterPartition (56), a partition leader proposing a new ISR to the controller of a ZooKeeper
cluster (KIP-497; Kafka's KafkaController.processAlterPartition). v0-1 name topics, v2+ give their
ids; v3 lists ISR members with broker epochs, which a ZooKeeper controller ignores, as Kafka's does.
A controller of a KRaft quorum takes it from its KRaft brokers (grete/broker/quorum/partitions.py).
"""

from __future__ import annotations

import uuid

from grete.broker.cluster.isr_changes import IsrChange
from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, ApiKey

Response = AlterPartitionResponse


@api(ApiKey.ALTER_PARTITION, 0, 3)
async def handle(ctx: RequestContext[ClusterControl], request: AlterPartitionRequest) -> AlterPartitionResponse:
    registry = ctx.broker.kraft_brokers
    if registry is not None and registry.partitions is not None:  # a controller of a KRaft quorum
        return await registry.partitions.alter_partition(request, ctx.version)
    cluster = ctx.broker.cluster
    assert isinstance(cluster, ZkBroker)
    controller = cluster.controller
    by_id = {a.topic_id: t for t, a in controller.ctx.assignments.items() if a.topic_id is not None}
    changes: list[IsrChange] = []
    unknown: dict[uuid.UUID, list[int]] = {}
    for topic in request.topics:
        name = topic.topic_name if ctx.version < 2 else by_id.get(topic.topic_id)
        if name is None:
            unknown[topic.topic_id] = [p.partition_index for p in topic.partitions]
            continue
        for p in topic.partitions:
            isr = p.new_isr if ctx.version < 3 else [b.broker_id for b in p.new_isr_with_epochs]
            changes.append(IsrChange(name, p.partition_index, p.leader_epoch, p.partition_epoch, tuple(isr)))
    error, results = await controller.alter_partition(request.broker_id, request.broker_epoch, changes)
    if error:
        return Response(error_code=error)
    topics: dict[str, Response.TopicData] = {}
    for result in results:
        name = result.change.topic
        assignment = controller.ctx.assignments.get(name)
        data = topics.setdefault(name, Response.TopicData(
            topic_name=name, topic_id=assignment.topic_id if assignment and assignment.topic_id else ZERO_UUID))
        code = result.error
        if code == ErrorCode.INELIGIBLE_REPLICA and ctx.version < 2:
            code = ErrorCode.OPERATION_NOT_ATTEMPTED
        state = result.state
        data.partitions.append(Response.PartitionData(
            partition_index=result.change.partition, error_code=code,
            leader_id=state.leader if state else -1, leader_epoch=state.leader_epoch if state else -1,
            isr=list(state.isr) if state else [], leader_recovery_state=1 if state and state.recovering else 0,
            partition_epoch=state.zk_version if state else -1))
    for topic_id, indexes in unknown.items():
        topics[str(topic_id)] = Response.TopicData(topic_id=topic_id, partitions=[
            Response.PartitionData(partition_index=i, error_code=ErrorCode.UNKNOWN_TOPIC_ID, leader_id=-1,
                                   leader_epoch=-1, partition_epoch=-1) for i in indexes])
    return Response(error_code=0, topics=list(topics.values()))
