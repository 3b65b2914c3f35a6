"""What the active controller knows of the cluster (Kafka's ControllerContext): its epoch and the
ZooKeeper version that fences its writes, the live brokers with their epochs, every topic's
assignment and every partition's state. One owner: the controller's event task."""

from __future__ import annotations

from dataclasses import dataclass, field

from grete.coordinator.zookeeper import zk_layout as zk

TopicPartition = tuple[str, int]


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = 0
    controller_id: int = -1
    live: dict[int, zk.BrokerInfo] = field(default_factory=dict)
    assignments: dict[str, zk.TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, zk.PartitionState] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    shutting_down: set[int] = field(default_factory=set)
    # Replicas on a live broker whose log dir failed, by broker (Kafka's replicasOnOfflineDirs): they
    # answered LeaderAndIsr with KAFKA_STORAGE_ERROR; forgotten when the broker starts again.
    offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)

    def replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        """The replica of ``tp`` on ``broker_id`` can serve: its broker is live and its dir online."""
        return broker_id in self.live and tp not in self.offline_dirs.get(broker_id, ())

    def replicas(self, tp: TopicPartition) -> list[int]:
        assignment = self.assignments.get(tp[0])
        return list(assignment.partitions.get(tp[1], [])) if assignment else []

    def partitions(self) -> list[TopicPartition]:
        return sorted((t, p) for t, a in self.assignments.items() for p in a.partitions)

    def partitions_on(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(tp)]
