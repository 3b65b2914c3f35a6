"""The embedded node as a cluster of one (the ``ClusterView`` of grete/broker/cluster_view.py): this
node is the only live broker and the controller, the only replica of every partition and the leader
of it, and runs as a Kafka 4.3 KRaft cluster of one answers."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from grete.broker.cluster_view import (
    ListedBroker,
    PartitionState,
    Reassignment,
    TopicPartition,
    replica_list_error,
)
from grete.broker.config import BrokerConfig
from grete.broker.network.listeners import Listener, security_protocol
from grete.broker.replica.replica_manager import ReplicaManager
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.manager import LogManager

MIN_ISR = "min.insync.replicas"


class Node(Protocol):
    """What the view reads of the node (a ``grete.broker.broker.Broker``)."""

    node_id: int
    config: BrokerConfig
    advertised: list[Listener]
    replicas: ReplicaManager
    log_manager: LogManager
    log_dirs: list[Path]


class LocalCluster:
    zk_broker_apis = False
    replicates = False
    auto_create_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    auto_create_waits_open = True  # the answer goes out once the new partitions take writes
    configures_every_broker = False
    sweeps_tokens = True
    forwards_voter_changes = False

    def __init__(self, broker: Node) -> None:
        self._broker = broker
        self.broker_epoch = -1

    def live_brokers(self) -> list[BrokerInfo]:
        broker = self._broker
        endpoints = tuple(EndPoint(a.name, a.host, a.port, security_protocol(broker.config, a.name))
                          for a in broker.advertised)
        cordoned = broker.log_manager.cordoned >= set(broker.log_dirs)
        return [BrokerInfo(broker.node_id, endpoints, broker.config.get_str("broker.rack") or None, cordoned=cordoned)]

    def registered_brokers(self) -> list[BrokerInfo]:
        return self.live_brokers()

    def controller_id(self) -> int:
        return self._broker.node_id

    def controller_listeners(self) -> list[str]:
        """The node is its own quorum: its ``controller.listener.names`` are controller endpoints
        (KIP-919's ``--bootstrap-controller``)."""
        return self._broker.config.get_list("controller.listener.names")

    def listed_brokers(self, listener: str, *, fenced: bool = False) -> list[ListedBroker]:
        """This node, at the address advertised for ``listener`` (the first one if it has none);
        it is never fenced."""
        broker = self._broker
        found = next((a for a in broker.advertised if a.name == listener), broker.advertised[0])
        return [ListedBroker(broker.node_id, found.host, found.port, None)]

    def partition_states(self, meta: TopicMeta, indexes: list[int], listener: str,
                         listener_not_found: bool) -> list[PartitionState]:
        """From this node's replica: offline (no leader, this replica offline) when its log dir failed,
        LEADER_NOT_AVAILABLE while it is not open."""
        return [self._partition_state(meta, index) for index in indexes]

    def offline_replicas(self, meta: TopicMeta, index: int, listener: str) -> list[int]:
        """This node, when its replica's log dir failed."""
        return [self._broker.node_id] if self._broker.replicas.is_offline(meta.name, index) else []

    def _partition_state(self, meta: TopicMeta, index: int) -> PartitionState:
        replicas, node = self._broker.replicas, self._broker.node_id
        pmeta = meta.partitions[index]
        partition = replicas.partitions.get((meta.name, index))
        epoch = partition.leader_epoch if partition is not None else pmeta.leader_epoch
        if replicas.is_offline(meta.name, index):
            return PartitionState(ErrorCode.LEADER_NOT_AVAILABLE, -1, epoch, [r for r in pmeta.isr if r != node], [node])
        error = ErrorCode.NONE if partition is not None and partition.online else ErrorCode.LEADER_NOT_AVAILABLE
        return PartitionState(error, pmeta.leader, epoch, list(pmeta.isr), list(pmeta.offline_replicas))

    def coordinator_for(self, topic: str, index: int) -> tuple[int, str | None, int]:
        """This node, unless the coordinator's partition is offline (its log dir failed) or missing."""
        broker = self._broker
        if broker.replicas.is_offline(topic, index) or (topic, index) not in broker.replicas.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the coordinator's partition {topic}-{index} is offline", -1
        return ErrorCode.NONE, None, broker.node_id

    def check_broker_configs(self, scope: str, before: dict[str, str], after: dict[str, str]) -> None:
        """Eligible leader replicas are on, as in a Kafka 4.3 KRaft cluster: min.insync.replicas lives
        at cluster level only and stays there (Kafka's controller rules)."""
        if scope and MIN_ISR in after:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while "
                                                       "ELR is enabled.")
        if not scope and MIN_ISR in before and MIN_ISR not in after:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while "
                                                       "ELR is enabled.")

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        """Every partition's leader is its preferred replica and sits in the ISR: no election is ever
        needed. An election of all partitions (None) elects none, so answers none."""
        hosted = self._broker.replicas.partitions
        return {tp: ErrorCode.ELECTION_NOT_NEEDED if tp in hosted else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for tp in partitions or []}

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        return {}  # never one in progress

    async def forwarded(self, request: Message, version: int) -> Message | None:
        return None  # answered here

    async def zookeeper_offset(self, group: str, topic: str, partition: int) -> int | None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "offsets in ZooKeeper are a ZooKeeper cluster's")

    async def store_zookeeper_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "offsets in ZooKeeper are a ZooKeeper cluster's")

    async def unregister_broker(self, broker_id: int) -> None:
        """The node's own registration is renewed as soon as it goes (Kafka's combined node of one
        registers again at its next heartbeat): nothing changes. Any other id is not registered."""
        if broker_id != self._broker.config.node_id:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")

    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]
                       ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Nothing can move: a reassignment to this node alone is already done, none is in progress."""
        return {tp: self._reassignment(tp, replicas) for tp, replicas in wanted.items()}

    def _reassignment(self, tp: TopicPartition, replicas: list[int] | None) -> tuple[ErrorCode, str | None]:
        if tp not in self._broker.replicas.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        if replicas is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No ongoing reassignment for this partition."
        refused = replica_list_error(replicas)
        if refused is not None:
            return refused
        unknown = [r for r in replicas if r != self._broker.node_id]
        if unknown:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker(s) {unknown} that are not registered.")
        return ErrorCode.NONE, None
