"""The cluster as a controller of a KRaft quorum sees it: the brokers are the KRaft brokers
registered with the quorum and unfenced (where CreateTopics places replicas), and the controller
is the quorum's leader, which elects leaders (grete/broker/quorum/elections.py), reassigns partitions
(grete/broker/quorum/reassignments.py) and keeps every broker's dynamic configs. The rest is the single node's view (grete.broker.local_cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grete.broker.local_cluster import LocalCluster
from grete.coordinator.zookeeper.zk_layout import BrokerInfo
from grete.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from grete.broker.broker import Broker
    from grete.broker.cluster_view import Reassignment, TopicPartition
    from grete.broker.quorum.brokers import BrokerRegistry
    from grete.broker.quorum.driver import RaftDriver
    from grete.broker.quorum.partitions import PartitionControl
    from grete.coordinator.kraft.quorum_store import QuorumMetadataStore


class QuorumCluster(LocalCluster):
    # A BROKER config resource may name any broker: the controller keeps them all, as Kafka's takes
    # any broker id (ControllerConfigurationValidator).
    configures_every_broker = True

    def __init__(self, broker: Broker, registry: BrokerRegistry, driver: RaftDriver,
                 store: QuorumMetadataStore, partitions: PartitionControl) -> None:
        super().__init__(broker)
        self._registry = registry
        self._driver = driver
        self._store = store
        self._partitions = partitions

    def live_brokers(self) -> list[BrokerInfo]:
        return self._registry.live()

    def registered_brokers(self) -> list[BrokerInfo]:
        return self._registry.registered()

    def controller_id(self) -> int:
        return self._driver.describe()[0]

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        """Elected among the unfenced brokers and committed as one batch; NOT_CONTROLLER (raised)
        on a voter that does not lead, so the caller asks the leader."""
        return await self._partitions.elect_leaders(preferred, partitions)

    async def unregister_broker(self, broker_id: int) -> None:
        await self._registry.unregister(broker_id)

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        return self._partitions.reassignments()

    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]
                       ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        return await self._partitions.reassign(wanted)
