"""A broker's ZooKeeper cluster as its handlers ask about it (the ``ClusterView`` of
grete/broker/cluster_view.py): a ``ZkBroker`` that answers from its metadata cache (Kafka 3.9's
ZkMetadataCache) and passes elections and reassignments to the controller."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.cluster_view import (
    ListedBroker,
    PartitionState,
    Reassignment,
    TopicPartition,
    replica_list_error,
)
from grete.coordinator.metadata import TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError

NOT_CONTROLLER = "This is not the correct controller for this cluster."


class ZkCluster(ZkBroker):
    zk_broker_apis = True
    replicates = True
    auto_create_error = ErrorCode.LEADER_NOT_AVAILABLE
    # The answer goes out once the topic is in ZooKeeper, as Kafka's AutoTopicCreationManager answers:
    # the controller elects the leaders meanwhile.
    auto_create_waits_open = False

    def controller_listeners(self) -> list[str]:
        return []  # a ZooKeeper-mode broker has no controller endpoint

    def listed_brokers(self, listener: str) -> list[ListedBroker]:
        """Every live broker with an endpoint on ``listener`` (Kafka lists only those)."""
        return [ListedBroker(info.id, e.host, e.port, info.rack)
                for info in self.live_brokers() if (e := info.endpoint(listener)) is not None]

    def partition_states(self, meta: TopicMeta, indexes: list[int], listener: str,
                         listener_not_found: bool) -> list[PartitionState]:
        """A leader that is not live, or has no endpoint on ``listener``, is reported as none:
        LEADER_NOT_AVAILABLE, or LISTENER_NOT_FOUND (if ``listener_not_found``) when the leader lives
        but lacks the listener."""
        live = {b.id: b for b in self.live_brokers()}
        states = []
        for index in indexes:
            pmeta = meta.partitions[index]
            leader = live.get(pmeta.leader)
            error, leader_id = ErrorCode.NONE, pmeta.leader
            if leader is None or leader.endpoint(listener) is None:
                error = (ErrorCode.LISTENER_NOT_FOUND if leader is not None and listener_not_found
                         else ErrorCode.LEADER_NOT_AVAILABLE)
                leader_id = -1
            states.append(PartitionState(error, leader_id, pmeta.leader_epoch, list(pmeta.isr),
                                         list(pmeta.offline_replicas)))
        return states

    def coordinator_for(self, topic: str, index: int) -> tuple[int, str | None, int]:
        """The leader of the coordinator's partition, as the metadata cache knows it."""
        meta = self.metadata.topic(topic)
        leader = meta.partitions[index].leader if meta is not None and index in meta.partitions else -1
        if leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic}-{index} has no leader", -1
        return ErrorCode.NONE, None, leader

    def check_broker_configs(self, scope: str, before: dict[str, str], after: dict[str, str]) -> None:
        """Kafka 3.9 has no eligible leader replicas: min.insync.replicas is an ordinary dynamic config."""

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        return dict(sorted((await self.controller.elect_leaders(preferred, partitions)).items()))

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        """The controller's reassignments in progress; NOT_CONTROLLER (raised) on any other broker."""
        if not self.controller.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER)
        return self.controller.reassignments()

    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]
                       ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Refuses what Kafka refuses before the controller sees it; the controller starts (a replica
        list) or cancels (None) the others. NOT_CONTROLLER (raised) on any other broker."""
        if not self.controller.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER)
        outcome: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        targets: dict[TopicPartition, list[int] | None] = {}
        for tp, replicas in wanted.items():
            refused = replica_list_error(replicas) if replicas is not None else None
            if refused is not None:
                outcome[tp] = refused
            else:
                targets[tp] = replicas
        outcome.update(await self.controller.reassign(targets) if targets else {})
        return outcome
