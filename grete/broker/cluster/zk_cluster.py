"""A broker's ZooKeeper cluster as its handlers ask about it (the ``ClusterView`` of
grete/broker/cluster_view.py): a ``ZkBroker`` that answers from its metadata cache (Kafka 3.9's
ZkMetadataCache) and passes elections and reassignments to the controller."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.cluster_view import BrokersFromMetadata, Reassignment, TopicPartition, replica_list_error
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.zookeeper.zk_client import NodeExistsError, NoNodeError
from grete.coordinator.zookeeper.zk_layout import consumer_offset_path
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError

NOT_CONTROLLER = "This is not the correct controller for this cluster."


class ZkCluster(ZkBroker, BrokersFromMetadata):
    zk_broker_apis = True
    replicates = True
    forwards_voter_changes = False
    auto_create_error = ErrorCode.LEADER_NOT_AVAILABLE
    # The answer goes out once the topic is in ZooKeeper, as Kafka's AutoTopicCreationManager answers:
    # the controller elects the leaders meanwhile.
    auto_create_waits_open = False

    def controller_listeners(self) -> list[str]:
        return []  # a ZooKeeper-mode broker has no controller endpoint

    def known_topic(self, name: str) -> TopicMeta | None:
        return self.metadata.topic(name)

    async def forwarded(self, request: Message, version: int) -> Message | None:
        return None  # answered here

    def check_broker_configs(self, scope: str, before: dict[str, str], after: dict[str, str]) -> None:
        """Kafka 3.9 has no eligible leader replicas: min.insync.replicas is an ordinary dynamic config."""

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        return dict(sorted((await self.controller.elect_leaders(preferred, partitions)).items()))

    async def zookeeper_offset(self, group: str, topic: str, partition: int) -> int | None:
        found = await self.zk.get(consumer_offset_path(group, topic, partition))
        return None if found is None else int(found[0].decode())

    async def store_zookeeper_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Kafka 3.9's setOrCreateConsumerOffset: set the znode, or create it with its parents."""
        path, data = consumer_offset_path(group, topic, partition), str(offset).encode()
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:  # created meanwhile by another commit
                await self.zk.set(path, data)

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
