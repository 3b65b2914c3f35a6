"""The cluster around a broker, as its handlers ask about it. Two implementations, one chosen when the
node is assembled (``grete.broker.node``): the embedded node's ``grete.broker.local_cluster.LocalCluster``
(a cluster of one: this node is every live broker and the controller) and a ZooKeeper cluster's
``grete.broker.cluster.zk_cluster.ZkCluster``. What differs between the two lives behind this view, so
no handler asks which one it is talking to."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from grete.coordinator.metadata import TopicMeta
from grete.coordinator.zookeeper.zk_layout import BrokerInfo
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]
# A reassignment in progress: the partition's replicas, those being added, those being removed.
Reassignment = tuple[list[int], list[int], list[int]]


class PartitionState(NamedTuple):
    """A partition as Metadata and DescribeTopicPartitions describe it."""

    error: ErrorCode
    leader: int
    leader_epoch: int
    isr: list[int]
    offline: list[int]


class ListedBroker(NamedTuple):
    """A broker as Metadata and DescribeCluster list it, at its address on one listener."""

    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool = False


def replica_list_error(replicas: list[int]) -> tuple[ErrorCode, str] | None:
    """Kafka's refusal of a reassignment's replica list that is empty or names a broker twice."""
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list cannot be empty."
    if len(set(replicas)) != len(replicas):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list contains duplicates."
    return None


class ClusterView(Protocol):
    @property
    def broker_epoch(self) -> int: ...
    # Whether the controller-to-broker APIs of a ZooKeeper cluster are served and advertised (and the
    # metadata quorum's APIs are not: the node is not its own quorum).
    zk_broker_apis: bool
    # Whether partitions replicate (followers fetch, the ISR moves the high watermark).
    replicates: bool
    # How Metadata answers a topic it auto-creates (KRaft: UNKNOWN_TOPIC_OR_PARTITION; ZooKeeper
    # mode: LEADER_NOT_AVAILABLE), and whether it waits for the new partitions to open first.
    auto_create_error: ErrorCode
    auto_create_waits_open: bool
    # Whether a BROKER config resource may name any broker id (a KRaft controller keeps every broker's
    # dynamic configs) or only this node's, as a Kafka broker alters its own.
    configures_every_broker: bool
    # Whether this node removes expired delegation tokens when it is the controller (a KRaft broker
    # never: its quorum's active controller does, as Kafka 4's).
    sweeps_tokens: bool
    # Whether AddRaftVoter and RemoveRaftVoter are served by forwarding them to the active controller
    # (a KRaft broker, as Kafka 4's KafkaApis), so tools reach the quorum with --bootstrap-server.
    forwards_voter_changes: bool

    def live_brokers(self) -> list[BrokerInfo]: ...
    # Where partitions may be placed when the live brokers are too few: a KRaft cluster's registered
    # brokers, fenced ones included (Kafka's replica placer); the live ones elsewhere.
    def registered_brokers(self) -> list[BrokerInfo]: ...
    def controller_id(self) -> int: ...
    def controller_listeners(self) -> list[str]: ...
    def listed_brokers(self, listener: str, *, fenced: bool = False) -> list[ListedBroker]: ...
    def partition_states(self, meta: TopicMeta, indexes: list[int], listener: str,
                         listener_not_found: bool) -> list[PartitionState]: ...
    def offline_replicas(self, meta: TopicMeta, index: int, listener: str) -> list[int]: ...
    def coordinator_for(self, topic: str, index: int) -> tuple[int, str | None, int]: ...
    def check_broker_configs(self, scope: str, before: dict[str, str], after: dict[str, str]) -> None: ...
    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]: ...
    def reassignments(self) -> dict[TopicPartition, Reassignment]: ...
    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]
                       ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]: ...
    # A request the active controller answers whole (DescribeQuorum, Alter/ListPartitionReassignments),
    # as it answers it, on a node that is not in the quorum (a KRaft broker forwards it, as Kafka's);
    # None where this node answers itself.
    async def forwarded(self, request: Message, version: int) -> Message | None: ...
    # UnregisterBroker: the broker's registration and its replicas' ISR memberships and leaderships
    # go (KRaft's; a broker still running registers again at its next heartbeat).
    async def unregister_broker(self, broker_id: int) -> None: ...
    # OffsetCommit v0 / OffsetFetch v0: a group's offsets kept in ZooKeeper (a ZooKeeper cluster's
    # brokers, as Kafka 3.9's; nothing else is asked: the registry serves v0 there only).
    async def zookeeper_offset(self, group: str, topic: str, partition: int) -> int | None: ...
    async def store_zookeeper_offset(self, group: str, topic: str, partition: int, offset: int) -> None: ...


class BrokersFromMetadata:
    """What a broker of a cluster of several answers from its metadata (a ZooKeeper broker's cache,
    a KRaft broker's image): the live brokers, the partitions' leaders, the coordinators."""

    configures_every_broker = False
    sweeps_tokens = True

    def live_brokers(self) -> list[BrokerInfo]:
        raise NotImplementedError

    def registered_brokers(self) -> list[BrokerInfo]:
        """A ZooKeeper cluster's brokers are registered while they live."""
        return self.live_brokers()

    def known_topic(self, name: str) -> TopicMeta | None:
        """The topic as this broker's metadata knows it."""
        raise NotImplementedError

    async def zookeeper_offset(self, group: str, topic: str, partition: int) -> int | None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "offsets in ZooKeeper are a ZooKeeper cluster's")

    async def store_zookeeper_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "offsets in ZooKeeper are a ZooKeeper cluster's")

    async def unregister_broker(self, broker_id: int) -> None:
        """A KRaft broker forwards UnregisterBroker to the active controller; a ZooKeeper-mode
        broker never serves it (Kafka 3.9's do not), so this is reached by neither."""
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "UnregisterBroker is a KRaft controller's request")

    def listed_brokers(self, listener: str, *, fenced: bool = False) -> list[ListedBroker]:
        """Every live broker with an endpoint on ``listener`` (Kafka lists only those); with
        ``fenced``, the registered fenced ones too, by id (DescribeCluster v2, KIP-1073)."""
        live = [ListedBroker(info.id, e.host, e.port, info.rack)
                for info in self.live_brokers() if (e := info.endpoint(listener)) is not None]
        if not fenced:
            return live
        listed = {b.node_id for b in live}
        return sorted(live + [ListedBroker(info.id, e.host, e.port, info.rack, True)
                              for info in self.registered_brokers()
                              if info.id not in listed and (e := info.endpoint(listener)) is not None])

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
                                         self.offline_replicas(meta, index, listener)))
        return states

    def offline_replicas(self, meta: TopicMeta, index: int, listener: str) -> list[int]:
        """The replicas Metadata lists as offline: as the controller last said (UpdateMetadata)."""
        return list(meta.partitions[index].offline_replicas)

    def coordinator_for(self, topic: str, index: int) -> tuple[int, str | None, int]:
        """The leader of the coordinator's partition, as the metadata cache knows it."""
        meta = self.known_topic(topic)
        leader = meta.partitions[index].leader if meta is not None and index in meta.partitions else -1
        if leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic}-{index} has no leader", -1
        return ErrorCode.NONE, None, leader
