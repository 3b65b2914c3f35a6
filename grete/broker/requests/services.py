"""What a handler may use of its node, by room: each API handler declares the narrow view it works
with as ``RequestContext[<view>]``, and mypy holds it to that view.

The node (``grete.broker.broker.Broker``) is one object that has them all; a handler sees only its
room's part of it:
- ``Basics``: who this node is, its configuration, the cluster's metadata and shape, the authorizer,
  the feature levels, metrics and the clock. Every room has them.
- ``DataPlane``: the replica layer (partitions, appends, fetch sessions, log dirs), the direct path,
  and the metadata quorum's log for the fetches that replicate it.
- ``Groups``: the group coordinators (classic, consumer, streams, share) and the internal topics they
  write to; ``Transactions``: the transaction coordinator and producer ids, beside the groups (offsets
  committed in a transaction).
- ``Admin``: topics, configs, quotas, credentials, delegation tokens and client telemetry.
- ``ClusterControl``: the KRaft quorum and its brokers' registrations, what this node serves
  (controller only, direct path) and where it listens.
``Everything`` is the pipeline's view, for what dispatches requests to other handlers (Envelope).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grete.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from grete.broker.cluster_view import ClusterView
    from grete.broker.config import BrokerConfig
    from grete.broker.direct.base import DirectPath
    from grete.broker.groups.producer_ids import ProducerIdManager
    from grete.broker.groups.share_coordinator import ShareCoordinator
    from grete.broker.groups.share_groups import ShareGroups
    from grete.broker.metrics.broker_metrics import BrokerMetrics
    from grete.broker.metrics.client_telemetry import ClientTelemetry
    from grete.broker.network.listeners import Listener
    from grete.broker.quorum.brokers import BrokerRegistry
    from grete.broker.quorum.driver import RaftDriver
    from grete.broker.quotas.client_quotas import ClientQuotas
    from grete.broker.replica.appends import Appends
    from grete.broker.replica.fetch_sessions import FetchSessionCache
    from grete.broker.replica.partition import Partition
    from grete.broker.replica.replica_manager import ReplicaManager
    from grete.broker.replica.txn_verification import TxnVerifier
    from grete.broker.requests.features import Features
    from grete.broker.security.authorizer import AclAuthorizer
    from grete.broker.security.delegation_tokens import DelegationTokenManager
    from grete.coordinator.groups.group import GroupCoordinator
    from grete.coordinator.metadata import MetadataStore, TopicMeta
    from grete.coordinator.transactions.txn import TransactionCoordinator
    from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
    from grete.storage.manager import LogManager


class Basics(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def metadata(self) -> MetadataStore: ...
    @property
    def cluster(self) -> ClusterView: ...
    @property
    def authorizer(self) -> AclAuthorizer | None: ...
    @property
    def features(self) -> Features: ...
    @property
    def metrics(self) -> BrokerMetrics: ...
    def now_ms(self) -> int: ...
    def controller_id(self) -> int: ...
    def live_brokers(self) -> list[BrokerInfo]: ...
    def registered_brokers(self) -> list[BrokerInfo]: ...


class HostedPartitions(Protocol):
    @property
    def partitions(self) -> dict[tuple[str, int], Partition]: ...
    def partition(self, topic: str, index: int) -> Partition: ...


class CreatesTopics(Protocol):
    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False, wait_open: bool = True, elected: bool = True,
                           assignment: dict[int, list[int]] | None = None) -> TopicMeta | None: ...


class DataPlane(Basics, HostedPartitions, Protocol):
    @property
    def replicas(self) -> ReplicaManager: ...
    @property
    def appends(self) -> Appends: ...
    @property
    def fetch_sessions(self) -> FetchSessionCache: ...
    @property
    def log_manager(self) -> LogManager: ...
    @property
    def log_dirs(self) -> list[Path]: ...
    @property
    def direct(self) -> DirectPath | None: ...
    @property
    def quorum(self) -> RaftDriver | None: ...
    def topic_name_for(self, topic_id: uuid.UUID) -> str | None: ...
    def topic_id_for(self, name: str) -> uuid.UUID | None: ...


class Groups(Basics, HostedPartitions, CreatesTopics, Protocol):
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def share_groups(self) -> ShareGroups: ...
    @property
    def share_coordinator(self) -> ShareCoordinator: ...
    async def ensure_offsets_topic(self) -> TopicMeta: ...
    async def ensure_share_state_topic(self) -> TopicMeta: ...


class Transactions(Groups, Protocol):
    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...
    @property
    def producer_ids(self) -> ProducerIdManager: ...
    @property
    def txn_verifier(self) -> TxnVerifier | None: ...
    def coordinates_transactions_of(self, transactional_id: str | None) -> bool: ...
    def txn_coordinator_node(self, transactional_id: str) -> int | None: ...
    async def txn_log_replicated(self, transactional_id: str) -> ErrorCode: ...
    def broker_endpoint(self, broker_id: int, listener: str) -> EndPoint | None: ...
    async def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                                    replication_key: str = "offsets.topic.replication.factor") -> TopicMeta: ...


class Admin(Basics, HostedPartitions, CreatesTopics, Protocol):
    @property
    def quotas(self) -> ClientQuotas: ...
    @property
    def delegation_tokens(self) -> DelegationTokenManager: ...
    @property
    def client_telemetry(self) -> ClientTelemetry: ...
    @property
    def replicas(self) -> ReplicaManager: ...
    def topic_id_for(self, name: str) -> uuid.UUID | None: ...
    async def delete_topic(self, name: str) -> TopicMeta: ...
    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False,
                             assignment: list[list[int]] | None = None) -> None: ...
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    async def set_dynamic_configs(self, scope: str, configs: dict[str, str]) -> None: ...


class ClusterControl(Basics, Protocol):
    @property
    def quorum(self) -> RaftDriver | None: ...
    @property
    def kraft_brokers(self) -> BrokerRegistry | None: ...
    @property
    def controller_only(self) -> bool: ...
    @property
    def direct(self) -> DirectPath | None: ...
    @property
    def advertised(self) -> list[Listener]: ...


class Everything(DataPlane, Transactions, Admin, ClusterControl, Protocol):
    @property
    def faults(self) -> Any: ...  # grete.testing's fault injection (None outside tests)


if TYPE_CHECKING:
    from grete.broker.broker import Broker

    def _the_node_has_every_view(node: Broker) -> Everything:
        return node  # checked by mypy: the node satisfies every room's view
