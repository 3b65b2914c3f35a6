"""LeaderAndIsr (4), from the controller of a ZooKeeper cluster: which partitions this broker hosts,
which it leads, in which leader epoch (Kafka's ReplicaManager.becomeLeaderOrFollower).

Only a broker in a ZooKeeper cluster serves it (the connection closes elsewhere, as a KRaft broker's
does). v5+ carry topic ids and answer per topic id; v2-4 are grouped by topic name too.
"""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.replica.replica_manager import PartitionOrder
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, LeaderAndIsrRequest, LeaderAndIsrResponse
from grete.protocol.topics import INTERNAL_TOPICS

Response = LeaderAndIsrResponse


@api(ApiKey.LEADER_AND_ISR, 2, 7)
async def handle(ctx: RequestContext[DataPlane], request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    broker = ctx.broker
    cluster = broker.cluster
    assert isinstance(cluster, ZkBroker)
    if request.broker_epoch != -1 and request.broker_epoch < cluster.broker_epoch:
        return Response(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if not broker.replicas.check_controller_epoch(request.controller_epoch):
        return Response(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    # Where followers fetch from: the leaders' inter-broker endpoints, as the controller sent them.
    leaders = {leader.broker_id: (leader.host_name, leader.port) for leader in request.live_leaders}
    topics: list[Response.LeaderAndIsrTopicError] = []
    flat: list[Response.LeaderAndIsrPartitionError] = []
    for topic_state in request.topic_states:
        configs = await cluster.metadata.ensure_topic_configs(topic_state.topic_name)
        # The partitions as this order describes them: the metadata cache may not have the topic
        # yet (UpdateMetadata follows), and the log needs its id and configs to open.
        known = broker.metadata.topic(topic_state.topic_name)
        meta = known if known is not None and known.topic_id == topic_state.topic_id else TopicMeta(
            topic_state.topic_name, topic_state.topic_id, {}, dict(configs), topic_state.topic_name in INTERNAL_TOPICS)
        orders = []
        for p in topic_state.partition_states:
            meta.partitions.setdefault(p.partition_index, PartitionMeta(p.leader, p.leader_epoch, list(p.replicas),
                                                                        list(p.isr), [], p.partition_epoch))
            orders.append(PartitionOrder(p.partition_index, p.leader, p.leader_epoch, p.partition_epoch,
                                         tuple(p.replicas), tuple(p.isr)))
        errors = broker.replicas.become_leader_or_follower(meta, orders, leaders, broker.now_ms())
        topics.append(Response.LeaderAndIsrTopicError(topic_id=topic_state.topic_id, partition_errors=[
            Response.LeaderAndIsrPartitionError(partition_index=i, error_code=e) for i, e in sorted(errors.items())]))
        flat.extend(Response.LeaderAndIsrPartitionError(topic_name=topic_state.topic_name, partition_index=i,
                                                        error_code=e) for i, e in sorted(errors.items()))
    if ctx.version >= 5:
        return Response(error_code=0, topics=topics)
    return Response(error_code=0, partition_errors=flat)
