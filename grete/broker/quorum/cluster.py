"""The cluster as a controller of a KRaft quorum sees it: the brokers are the KRaft brokers
registered with the quorum and unfenced (where CreateTopics places replicas), and the controller
is the quorum's leader. The rest is the single node's view (grete.broker.local_cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grete.broker.local_cluster import LocalCluster
from grete.coordinator.zk_layout import BrokerInfo

if TYPE_CHECKING:
    from grete.broker.broker import Broker
    from grete.broker.quorum.brokers import BrokerRegistry
    from grete.broker.quorum.driver import RaftDriver


class QuorumCluster(LocalCluster):
    def __init__(self, broker: Broker, registry: BrokerRegistry, driver: RaftDriver) -> None:
        super().__init__(broker)
        self._registry = registry
        self._driver = driver

    def live_brokers(self) -> list[BrokerInfo]:
        return self._registry.live()

    def controller_id(self) -> int:
        return self._driver.describe()[0]
