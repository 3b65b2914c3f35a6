"""The broker's state, as request handlers see it: config, metadata, hosted partitions (through the
replica manager), coordinators, open connections, and the topic operations of the admin APIs.

Assembling a node (listeners, start-up order, maintenance, shutdown) is ``grete.broker.node``'s job;
this module knows nothing of sockets or of the handlers. Everything mutable here is touched only from
the node's event loop thread; the log cleaner is the one piece of work that runs on another thread
(inside grete.storage).
"""

from __future__ import annotations

import importlib
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grete.broker.cluster.placement import assign_replicas
from grete.broker.cluster_view import ClusterView
from grete.broker.config import (
    BrokerConfig,
    ConfigError,
    StartupError,
    applicable_dynamic,
    check_dynamic_update,
    cordoned_dirs,
    validate_topic_configs,
)
from grete.broker.direct.base import DirectPath
from grete.broker.groups.producer_ids import ProducerIdManager
from grete.broker.groups.share_coordinator import LocalSharePersister, ShareCoordinator
from grete.broker.groups.share_groups import ShareGroups
from grete.broker.local_cluster import LocalCluster
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.metrics.client_telemetry import ClientTelemetry
from grete.broker.network.listeners import Listener, parse_listeners
from grete.broker.network.log_limit import LimitedWarnings
from grete.broker.quotas.client_quotas import ClientQuotas
from grete.broker.quotas.connection_quotas import ConnectionQuotas
from grete.broker.quotas.replication_quotas import alter_log_dirs_quota
from grete.broker.replica.appends import Appends
from grete.broker.replica.fetch_sessions import FetchSessionCache
from grete.broker.replica.partition import Partition
from grete.broker.replica.replica_manager import ReplicaManager
from grete.broker.replica.txn_verification import TxnVerifier
from grete.broker.requests.features import Features, KRaftVersion
from grete.broker.security.delegation_tokens import DelegationTokenManager
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.kraft.local import open_local_store
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.coordinator.metadata import (
    ChangeKind,
    MetadataChange,
    MetadataStore,
    TopicExists,
    TopicMeta,
)
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.framing import BufferPool, MemoryPool
from grete.protocol.topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    validate_topic_name,
)
from grete.storage.config import LogConfig
from grete.storage.manager import LogManager

if TYPE_CHECKING:
    from grete.broker.quorum.brokers import BrokerRegistry
    from grete.broker.quorum.driver import RaftDriver
    from grete.broker.quorum.registration_manager import ControllerRegistrar
    from grete.broker.security.authorizer import AclAuthorizer
    from grete.coordinator.transactions.txn import TransactionCoordinator

log = logging.getLogger(__name__)


class OpenConnection(Protocol):
    """An open client connection, as the broker tracks it: to close them all on shutdown, and to
    give back receive buffers of connections gone quiet."""

    def close(self) -> None: ...
    def trim(self, quiet_since: float) -> None: ...


class ReloadableTls(Protocol):
    """An SSL listener's stores, as the broker checks and reloads them (``grete.broker.network.tls.ListenerTls``,
    loaded only for TLS listeners)."""

    def check(self, config: BrokerConfig, proposed: BrokerConfig) -> None: ...
    def reload(self, config: BrokerConfig) -> bool: ...


def _local_store(config: BrokerConfig) -> MetadataStore:
    """The single node's metadata log; a dir it cannot use stops the start with the reason."""
    try:
        return open_local_store(config.metadata_log_dir, config.node_id, cluster_id=config.raw("cluster.id"))
    except KafkaError as exc:
        raise StartupError(exc.message or str(exc)) from None


def _acl_authorizer(config: BrokerConfig, metadata: MetadataStore) -> AclAuthorizer | None:
    """Kafka's ACL authorizer if ``authorizer.class.name`` names it. Loaded by name and only when that
    key is set: a broker without ACLs does not import them (nor their codecs) at start-up."""
    if not config.get_str("authorizer.class.name").strip():
        return None
    module = importlib.import_module("grete.broker.security.authorizer")
    if not module.configured(config):  # ConfigError for a class grete does not have
        return None
    authorizer: AclAuthorizer = module.AclAuthorizer(config, metadata)
    return authorizer


class Broker:
    def __init__(self, config: BrokerConfig, *, metadata: MetadataStore | None = None,
                 cluster: ClusterView | None = None, kraft_version: KRaftVersion | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.listeners = parse_listeners(config.get_list("listeners"))
        advertised = config.get_list("advertised.listeners")
        self.advertised = parse_listeners(advertised) if advertised else list(self.listeners)
        self.bound: list[Listener] = []
        self.log_dirs = config.log_dirs
        # Chosen here, once: a ZooKeeper cluster's view (grete.broker.cluster.zk_cluster), or the
        # embedded node's, a cluster of one.
        self.cluster: ClusterView = cluster if cluster is not None else LocalCluster(self)
        self.metadata: MetadataStore = metadata or _local_store(config)
        self._apply_dynamic_configs()
        # Kafka's ACL authorizer when authorizer.class.name names it; None: every request allowed.
        self.authorizer = _acl_authorizer(config, self.metadata)
        self.metadata.changes.subscribe(self._on_metadata_change)
        self.log_manager = LogManager(self.log_dirs, self._default_log_config())
        self.log_manager.retention_check_interval_ms = config.get_int("log.retention.check.interval.ms")
        self.log_manager.cordoned = cordoned_dirs(config)
        self.replicas = ReplicaManager(self.node_id, self.log_manager, self.metadata, self.topic_log_config,
                                       cluster=self.cluster.replicates)
        self.replicas.alter_dirs_quota = alter_log_dirs_quota(config)
        self.connections: set[OpenConnection] = set()
        self.client_telemetry = ClientTelemetry()
        self.connection_quotas = ConnectionQuotas(config, self.metadata)
        # SSL listeners' reloadable contexts (grete.broker.network.tls.ListenerTls), set by the node as it listens.
        self.listener_tls: dict[str, ReloadableTls] = {}
        self.quotas = ClientQuotas(config, self.metadata)
        # In a cluster only the controller sweeps expired tokens (Kafka 3.9's KafkaController, Kafka 4's
        # active controller).
        self.delegation_tokens = DelegationTokenManager(
            config, self.metadata,
            sweeps=lambda: self.cluster.sweeps_tokens and self.cluster.controller_id() == self.node_id)
        self.buffer_pool = BufferPool()
        self.memory_pool = MemoryPool(config.get_int("queued.max.request.bytes"))
        self.bad_input = LimitedWarnings()  # closes for bad input: logged, then counted
        self.metrics = BrokerMetrics()
        self.replicas.isr_changed = self.metrics.isr_changed
        # The append path of Produce, WriteTxnMarkers and the direct path; its setting parsed once.
        self.appends = Appends(self.replicas, self, self.metrics,
                               full_validation=config.get_str("grete.produce.validation") == "full")
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self.producer_ids = ProducerIdManager(self.metadata)
        self.features = Features(self.metadata if isinstance(self.metadata, KRaftMetadataStore) else None, self.node_id,
                                 kraft_version, static_min_isr=config.get_int("min.insync.replicas"))
        self.share_groups = ShareGroups(config, self.metadata, self.partition)
        # The share coordinator of the __share_group_state partitions this broker leads; share-partition
        # leaders read and write through it (a cluster's from other brokers too: zk_broker wires that).
        self.share_coordinator = ShareCoordinator(config, self.replicas)
        if not self.cluster.replicates:  # a cluster's brokers reach each other's: zk_broker wires that
            self.share_groups.persister = LocalSharePersister(self.share_coordinator, self.ensure_share_state_topic)
        # Set by the node before it listens (their stores write through this broker's partitions).
        self._group_coordinator: GroupCoordinator | None = None
        self._txn_coordinator: TransactionCoordinator | None = None
        self._start_txn_coordinator: Callable[[], TransactionCoordinator] | None = None  # start_transactions
        # In a cluster: AddPartitionsToTxn to coordinators on other brokers (KIP-890 part 1).
        self.txn_verifier: TxnVerifier | None = None
        # grete.testing's fault injection (grete/testing/faults.py); None outside tests.
        self.faults: Any = None
        # The direct data path (docs/direct.md), set by the node when ``direct.transports`` is set.
        self.direct: DirectPath | None = None
        # A voter's Raft driver in a quorum of several controllers (grete/broker/quorum), set by the node.
        self.quorum: RaftDriver | None = None
        # process.roles=controller: this node serves the quorum's APIs alone, as a Kafka controller.
        self.controller_only = False
        # The KRaft brokers registered with that quorum (its leader takes their heartbeats).
        self.kraft_brokers: BrokerRegistry | None = None
        # A controller's own registration with the active controller (Kafka's ControllerRegistrationManager).
        self.controller_registration: ControllerRegistrar | None = None
        self.started_at = time.monotonic()

    # --- dynamic broker configs ------------------------------------------------------------------
    def close_metadata(self) -> None:
        """The single node's metadata log closes with the broker (a cluster's store is ZooKeeper)."""
        if isinstance(self.metadata, KRaftMetadataStore):
            self.metadata.close()

    def _apply_dynamic_configs(self) -> None:
        self.config.set_dynamic(applicable_dynamic(self.metadata.broker_configs(str(self.node_id)), "this broker's"),
                                applicable_dynamic(self.metadata.broker_configs(""), "the cluster-wide"))

    def _on_metadata_change(self, change: MetadataChange) -> None:
        if change.kind is ChangeKind.BROKER_CONFIGS_CHANGED:
            self._apply_dynamic_configs()
            # What reads the config on each use picks the change up by itself; these hold it.
            self.log_manager.default_config = self._default_log_config()
            self.replicas.reconfigure_all()
            self.connection_quotas.reload(self.config)
            self.log_manager.cordoned = cordoned_dirs(self.config)
            self._reload_tls()

    def _reload_tls(self) -> None:
        for name, listener in self.listener_tls.items():
            try:
                if listener.reload(self.config):
                    log.info("listener %s: keystore and truststore reloaded; new connections use them", name)
            except ConfigError as exc:  # a change this broker did not check (another broker wrote it)
                log.error("listener %s: the new SSL stores cannot be used, the old ones stay: %s", name, exc)

    async def set_dynamic_configs(self, scope: str, configs: dict[str, str]) -> None:
        """Replace the dynamic configs of this broker (``scope`` = its id) or of the cluster default
        (``scope`` = ""), as AlterConfigs on a BROKER resource does. Raises KafkaError."""
        try:
            clean = check_dynamic_update(configs, cluster_default=scope == "", current=self.config)
            if scope == str(self.node_id):
                proposed = self.config.with_dynamic(clean, self.config.dynamic_default)
                for listener in self.listener_tls.values():
                    listener.check(self.config, proposed)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        await self.metadata.set_broker_configs(scope, clean)

    async def ensure_cluster_min_isr(self) -> None:
        """Kafka 4.3's controller writes min.insync.replicas as a cluster-level config when eligible
        leader replicas are on (its ELR safety record), with the value from its static config; the
        single node, a KRaft-like cluster of one, does the same once, so topics show it as a
        DYNAMIC_DEFAULT_BROKER_CONFIG as Kafka 4.3 shows it."""
        defaults = self.metadata.broker_configs("")
        if "min.insync.replicas" not in defaults:
            value = str(self.config.get_int("min.insync.replicas"))
            await self.metadata.set_broker_configs("", {**defaults, "min.insync.replicas": value})

    # --- the cluster -------------------------------------------------------------------------
    def live_brokers(self) -> list[BrokerInfo]:
        """Every live broker with its advertised endpoints and rack (this node alone when embedded)."""
        return self.cluster.live_brokers()

    def registered_brokers(self) -> list[BrokerInfo]:
        return self.cluster.registered_brokers()  # a KRaft cluster's fenced ones included

    def controller_id(self) -> int:
        return self.cluster.controller_id()

    def broker_endpoint(self, broker_id: int, listener: str) -> EndPoint | None:
        """Where clients on ``listener`` reach ``broker_id``: None if it is not live or has no such
        listener."""
        info = next((b for b in self.live_brokers() if b.id == broker_id), None)
        return info.endpoint(listener) if info is not None else None

    def assign_replicas(self, partitions: int, replication: int, first_partition: int = 0,
                        continuing: TopicMeta | None = None) -> dict[int, list[int]]:
        """Replica placement over the live brokers, or, in a KRaft cluster with too few of them, over
        the registered ones, fenced included, as Kafka's replica placer does: a fenced broker is a
        follower, never a partition's first replica, and the controller leaves it out of the ISR.
        ``continuing``: the topic whose partitions are added to. Raises INVALID_REPLICATION_FACTOR
        with Kafka's message."""
        # Kafka 4.3's controller places no replica on a broker whose log dirs are all cordoned (KIP-1066).
        live = [b for b in self.live_brokers() if not b.cordoned]
        if not live:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication} time(s): All brokers are currently "
                             "fenced, or have all their log directories cordoned.")
        brokers = live if replication <= len(live) else [b for b in self.cluster.registered_brokers() if not b.cordoned]
        if replication > len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             _too_few_brokers(replication, len(brokers), self.cluster.zk_broker_apis))
        start = None if continuing is None else _continuation(continuing, brokers)
        placed = assign_replicas(brokers, partitions, replication, first_partition, start=start)
        live_ids = {b.id for b in live}
        return {p: _led_by_live(replicas, live_ids) for p, replicas in placed.items()}

    # --- coordinators ------------------------------------------------------------------------
    @property
    def group_coordinator(self) -> GroupCoordinator:
        if self._group_coordinator is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not started")
        return self._group_coordinator

    @group_coordinator.setter
    def group_coordinator(self, coordinator: GroupCoordinator) -> None:
        self._group_coordinator = coordinator

    def start_transactions(self, listener: str) -> None:
        """The transaction coordinator (``grete.broker.groups.transactions``, loaded by name): started now in a
        cluster (leadership changes load its partitions) or when ``__transaction_state`` has state to
        load, otherwise by the first request that uses it (nothing to load then, so it starts the same):
        no start-up import of it, and no coordinator or timers on a broker no transaction reaches.
        ``listener``: where a cluster's leaders are reached for markers."""
        def start() -> TransactionCoordinator:
            transactions = importlib.import_module("grete.broker.groups.transactions")
            coordinator: TransactionCoordinator = transactions.start_txn_coordinator(self, listener)
            return coordinator

        self._start_txn_coordinator = start
        if self.cluster.replicates or self.metadata.topic(TRANSACTION_STATE_TOPIC) is not None:
            self._txn_coordinator = start()

    @property
    def txn_coordinator(self) -> TransactionCoordinator:
        if self._txn_coordinator is None and self._start_txn_coordinator is not None:
            self._txn_coordinator = self._start_txn_coordinator()
        if self._txn_coordinator is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not started")
        return self._txn_coordinator

    @txn_coordinator.setter
    def txn_coordinator(self, coordinator: TransactionCoordinator) -> None:
        self._txn_coordinator = coordinator

    def coordinates_transactions_of(self, transactional_id: str | None) -> bool:
        """Whether this broker's transaction coordinator owns ``transactional_id`` (always on the
        single node): a transactional write is then checked against it directly. Otherwise the
        partition leader asks the coordinator's broker (``txn_coordinator_node``)."""
        if not self.cluster.replicates:
            return True
        if transactional_id is None or self._txn_coordinator is None:
            return False
        index = self._txn_coordinator.partition_for(transactional_id)
        hosted = self.replicas.partitions.get((TRANSACTION_STATE_TOPIC, index))
        return hosted is not None and hosted.is_leader

    def txn_coordinator_node(self, transactional_id: str) -> int | None:
        """The broker leading ``transactional_id``'s __transaction_state partition as this broker's
        metadata knows it, or None when there is none to ask (Kafka's AddPartitionsToTxnManager
        then answers COORDINATOR_NOT_AVAILABLE)."""
        if self._txn_coordinator is None:
            return None
        meta = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        found = meta.partitions.get(self._txn_coordinator.partition_for(transactional_id)) if meta else None
        if found is None or found.leader < 0 or not any(b.id == found.leader for b in self.live_brokers()):
            return None
        return found.leader

    async def txn_log_replicated(self, transactional_id: str) -> ErrorCode:
        """Wait until what the transaction coordinator wrote for ``transactional_id`` is in its
        partition's ISR (Kafka appends transaction state with acks=all and answers only then: a
        coordinator that fails over must find an acknowledged commit). NONE on the single node;
        NOT_COORDINATOR if leadership moved meanwhile, COORDINATOR_NOT_AVAILABLE if the ISR could
        not take it in time (Kafka's mapping for these appends)."""
        if self._txn_coordinator is None:
            return ErrorCode.NONE
        index = self._txn_coordinator.partition_for(transactional_id)
        partition = self.replicas.partitions.get((TRANSACTION_STATE_TOPIC, index))
        if partition is None or not partition.has_followers:
            return ErrorCode.NONE
        outcome = await partition.wait_for_replication(partition.log_end_offset,
                                                       self.config.get_int("request.timeout.ms"))
        if outcome == ErrorCode.NONE:
            return outcome
        return ErrorCode.NOT_COORDINATOR if outcome == ErrorCode.NOT_LEADER_OR_FOLLOWER else ErrorCode.COORDINATOR_NOT_AVAILABLE

    def coordinators(self) -> tuple[GroupCoordinator | None, TransactionCoordinator | None]:
        """Both coordinators, or None for one not started (for shutdown and the like)."""
        return self._group_coordinator, self._txn_coordinator

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        """Every partition this broker hosts, by (topic, index): the replica manager's table."""
        return self.replicas.partitions

    # --- topics ------------------------------------------------------------------------------
    def _default_log_config(self) -> LogConfig:
        return LogConfig.from_kafka(self.config.topic_defaults())

    def topic_log_config(self, meta: TopicMeta) -> LogConfig:
        props = self.config.topic_defaults()
        props.update(meta.configs)
        return LogConfig.from_kafka(props)

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION as Kafka answers for one it does not host."""
        return self.replicas.partition(topic, index)

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False, wait_open: bool = True, elected: bool = True,
                           assignment: dict[int, list[int]] | None = None) -> TopicMeta | None:
        """CreateTopics semantics; -1 means the broker default. Raises KafkaError. Returns once the
        partitions take writes, unless ``wait_open`` is false (the replica manager opens them as it
        learns of the topic; see :meth:`ReplicaManager.ready`). With ``elected`` false a ZooKeeper
        cluster's store returns once the topic is written, leaders or not (None then)."""
        validate_topic_name(name)
        if self.metadata.topic(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        partitions = self.config.get_int("num.partitions") if num_partitions == -1 else num_partitions
        replication = (self.config.get_int("default.replication.factor") if replication_factor == -1
                       else replication_factor)
        if partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0.")
        if assignment is None:
            assignment = self.assign_replicas(partitions, replication)
        try:
            clean = validate_topic_configs(configs or {}, zookeeper_mode=self.config.zookeeper_mode)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return None
        try:
            meta = await self.metadata.create_topic(name, assignment, clean, elected=elected,
                                                    internal=internal or name in INTERNAL_TOPICS)
        except TopicExists:  # created meanwhile, through another broker
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        # Logged where it is written: a KRaft broker's controller logs it (a combined node: once).
        log.log(logging.DEBUG if self.metadata.forwards else logging.INFO, "created topic %s with %d partition(s)",
                name, partitions)
        if wait_open and meta is not None:
            await self.replicas.ready(meta)
        return meta

    async def delete_topic(self, name: str) -> TopicMeta:
        meta = self.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not self.config.get_bool("delete.topic.enable"):
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
        await self.metadata.delete_topic(name)
        self.metrics.forget_topic(name)
        log.info("deleted topic %s", name)
        return meta

    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False,
                             assignment: list[list[int]] | None = None) -> None:
        meta = self.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        current = len(meta.partitions)
        if total < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {current} partitions, which is higher than the "
                             f"requested {total}.")
        if total == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        if validate_only:
            return
        replication = len(next(iter(meta.partitions.values())).replicas) if meta.partitions else 1
        placed = ({current + i: replicas for i, replicas in enumerate(assignment)} if assignment
                  else self.assign_replicas(total - current, replication, first_partition=current,
                                            continuing=meta))
        meta = await self.metadata.add_partitions(name, placed)
        await self.replicas.ready(meta)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's overrides; takes effect live on every partition's log."""
        meta = self.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            clean = validate_topic_configs(configs, zookeeper_mode=self.config.zookeeper_mode)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        await self.metadata.set_topic_configs(name, clean)  # the replica manager applies it to the logs

    async def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                                    replication_key: str = "offsets.topic.replication.factor") -> TopicMeta:
        meta = self.metadata.topic(name)
        if meta is None:
            replication = self.config.get_int(replication_key) if self.cluster.replicates else 1
            try:
                created = await self.create_topic(name, partitions, replication, configs, internal=True)
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                # Another broker is creating it: clients ask again (COORDINATOR_NOT_AVAILABLE).
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} is being created") from None
            assert created is not None
            meta = created
        return meta

    async def ensure_offsets_topic(self) -> TopicMeta:
        """``__consumer_offsets``, created on first use with Kafka's settings for it."""
        return await self.ensure_internal_topic(OFFSETS_TOPIC, self.config.get_int("offsets.topic.num.partitions"), {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.get_int("offsets.topic.segment.bytes")),
        })

    async def ensure_share_state_topic(self) -> TopicMeta:
        """``__share_group_state``, created on first use (a share fetch or a SHARE coordinator lookup)."""
        return await self.ensure_internal_topic(
            SHARE_GROUP_STATE_TOPIC, self.config.get_int("share.coordinator.state.topic.num.partitions"), {
                # Kafka 4.3.1's configs for it (DescribeConfigs): kept whole, the coordinator prunes it
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "compression.type": "producer",
                "segment.bytes": str(self.config.get_int("share.coordinator.state.topic.segment.bytes")),
                "min.insync.replicas": str(self.config.get_int("share.coordinator.state.topic.min.isr")),
            }, "share.coordinator.state.topic.replication.factor")

    def topic_id_for(self, name: str) -> uuid.UUID | None:
        meta = self.metadata.topic(name)
        return meta.topic_id if meta else None

    def topic_name_for(self, topic_id: uuid.UUID) -> str | None:
        meta = self.metadata.topic_by_id(topic_id)
        return meta.name if meta else None

    @property
    def advertised_listener(self) -> Listener:
        return self.advertised[0]

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def data_dir(self) -> Path:
        return self.log_dirs[0]


def _too_few_brokers(replication: int, brokers: int, zookeeper: bool) -> str:
    if zookeeper:  # Kafka 3.9's AdminUtils
        return f"Replication factor: {replication} larger than available brokers: {brokers}."
    return (f"Unable to replicate the partition {replication} time(s): The target replication factor of "
            f"{replication} cannot be reached because only {brokers} broker(s) are registered or some "
            "brokers have all their log directories cordoned.")


def _continuation(meta: TopicMeta, brokers: list[BrokerInfo]) -> int:
    """Where added partitions start in the broker list (Kafka's AdminZkClient.addPartitions): at
    partition 0's first replica, so preferred leaders keep rotating."""
    first = meta.partitions[0].replicas[0] if 0 in meta.partitions and meta.partitions[0].replicas else 0
    ids = sorted(b.id for b in brokers)
    return next((i for i, broker_id in enumerate(ids) if broker_id >= first), 0)


def _led_by_live(replicas: list[int], live: set[int]) -> list[int]:
    """``replicas`` with a live broker first (the partition's first leader), the others in order."""
    first = next((r for r in replicas if r in live), replicas[0])
    return [first, *(r for r in replicas if r != first)]
