"""The controller's requests to brokers, built from its context at the versions Kafka 3.9 sends
(inter.broker.protocol.version 3.9: LeaderAndIsr 7, UpdateMetadata 8, StopReplica 4).
"""

from __future__ import annotations

from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.protocol.codec import ZERO_UUID
from grete.protocol.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def _by_topic(partitions: list[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        grouped.setdefault(topic, []).append(index)
    return grouped


def leader_and_isr(ctx: ControllerContext, broker_id: int, broker_epoch: int, partitions: list[TopicPartition],
                   listener: str, is_new: bool) -> LeaderAndIsrRequest | None:
    if not partitions:
        return None
    topic_states = []
    leaders: set[int] = set()
    for topic, indexes in _by_topic(partitions).items():
        assignment = ctx.assignments[topic]
        states = []
        for index in indexes:
            state = ctx.states[(topic, index)]
            leaders.add(state.leader)
            states.append(LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                topic_name=topic, partition_index=index, controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=state.zk_version, replicas=list(assignment.partitions[index]),
                adding_replicas=list(assignment.adding.get(index, [])),
                removing_replicas=list(assignment.removing.get(index, [])),
                is_new=is_new, leader_recovery_state=1 if state.recovering else 0))
        topic_states.append(LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=topic, topic_id=assignment.topic_id or ZERO_UUID, partition_states=states))
    live_leaders = []
    for leader in sorted(leaders):
        info = ctx.live.get(leader)
        endpoint = info.endpoint(listener) if info else None
        if info is not None and endpoint is not None:
            live_leaders.append(LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                broker_id=leader, host_name=endpoint.host, port=endpoint.port))
    return LeaderAndIsrRequest(controller_id=ctx.controller_id, is_k_raft_controller=False,
                               controller_epoch=ctx.epoch, broker_epoch=broker_epoch, type=0,
                               topic_states=topic_states, live_leaders=live_leaders)


def update_metadata(ctx: ControllerContext, broker_epoch: int, partitions: list[TopicPartition],
                    deleting: list[TopicPartition]) -> UpdateMetadataRequest:
    topic_states = []
    grouped = _by_topic(partitions)
    gone = _by_topic(deleting)
    for topic in sorted(set(grouped) | set(gone)):
        assignment = ctx.assignments.get(topic)
        if assignment is None:
            continue
        states = []
        for index in grouped.get(topic, []):
            state = ctx.states.get((topic, index))
            if state is None:
                continue
            replicas = list(assignment.partitions.get(index, []))
            states.append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=topic, partition_index=index, controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                zk_version=state.zk_version, replicas=replicas,
                offline_replicas=[r for r in replicas if not ctx.replica_online(r, (topic, index))]))
        for index in gone.get(topic, []):
            state = ctx.states.get((topic, index))
            replicas = list(assignment.partitions.get(index, []))
            # Kafka's LeaderDuringDelete: brokers drop the partition from their caches.
            states.append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=topic, partition_index=index, controller_epoch=ctx.epoch,
                leader=LEADER_DURING_DELETE, leader_epoch=0, isr=list(state.isr) if state else [],
                zk_version=state.zk_version if state else 0, replicas=replicas,
                offline_replicas=[r for r in replicas if r not in ctx.live]))
        topic_states.append(UpdateMetadataRequest.UpdateMetadataTopicState(
            topic_name=topic, topic_id=assignment.topic_id or ZERO_UUID, partition_states=states))
    live_brokers = [
        UpdateMetadataRequest.UpdateMetadataBroker(
            id=info.id, rack=info.rack,
            endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=e.port, host=e.host, listener=e.listener,
                security_protocol=PROTOCOL_IDS.get(e.security_protocol, 0)) for e in info.endpoints])
        for _, info in sorted(ctx.live.items())]
    return UpdateMetadataRequest(controller_id=ctx.controller_id, is_k_raft_controller=False, type=0,
                                 controller_epoch=ctx.epoch, broker_epoch=broker_epoch,
                                 topic_states=topic_states, live_brokers=live_brokers)


def stop_replica(ctx: ControllerContext, broker_epoch: int, partitions: list[TopicPartition],
                 delete: bool) -> StopReplicaRequest:
    topic_states = []
    for topic, indexes in _by_topic(partitions).items():
        states = []
        for index in indexes:
            state = ctx.states.get((topic, index))
            epoch = EPOCH_DURING_DELETE if delete else (state.leader_epoch if state else -1)
            states.append(StopReplicaRequest.StopReplicaPartitionState(
                partition_index=index, leader_epoch=epoch, delete_partition=delete))
        topic_states.append(StopReplicaRequest.StopReplicaTopicState(topic_name=topic, partition_states=states))
    return StopReplicaRequest(controller_id=ctx.controller_id, is_k_raft_controller=False,
                              controller_epoch=ctx.epoch, broker_epoch=broker_epoch, topic_states=topic_states)

