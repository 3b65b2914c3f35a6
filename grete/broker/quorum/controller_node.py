"""A controller-only node (``process.roles=controller``): one voter of a KRaft controller quorum.

It keeps the metadata log and serves the quorum's APIs on its listeners (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch of ``__cluster_metadata``, DescribeQuorum, DescribeCluster for
``--bootstrap-controller``), its brokers' (registration, heartbeats, AlterPartition) and the admin
requests Kafka's controller carries out (grete/broker/requests/registry.py FORWARDED_APIS: topics, configs,
ACLs, quotas, SCRAM credentials, delegation tokens, elections, reassignments), with the handlers a broker uses on a store that commits
through the quorum; nothing a client of topics would ask: Kafka's controllers answer those on brokers. Its storage must be formatted first, as Kafka's (``grete storage format`` or
``kafka-storage format``, the same cluster id on every voter). The first leader of a new quorum writes
the format step's bootstrap records (``bootstrap.checkpoint``) as Kafka's first active controller does.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from grete.broker.broker import Broker
from grete.broker.config import BrokerConfig, StartupError
from grete.broker.quorum.addresses import VoterAddress, controller_endpoints, quorum_addresses
from grete.broker.quorum.brokers import BrokerRegistry
from grete.broker.quorum.cluster import QuorumCluster
from grete.broker.quorum.driver import RaftDriver
from grete.broker.quorum.image_changes import publish_entity_changes, publish_every_entity
from grete.broker.quorum.kraft_version import ControllerKRaftVersion
from grete.broker.quorum.partitions import PartitionControl
from grete.broker.quorum.registration_manager import ControllerRegistrar
from grete.broker.quorum.snapshot_image import load_snapshot, snapshot_records
from grete.broker.requests import release_versions as rv
from grete.coordinator.kraft.quorum import METADATA_PARTITION_DIR
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.kraft.raft import RaftConfig
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.raft_snapshots import SnapshotPolicy
from grete.coordinator.kraft.store import ELR_FEATURE
from grete.coordinator.kraft.voters import local_node
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import KafkaError
from grete.protocol.metadata import FeatureLevelRecord
from grete.protocol.metadata_frame import decode_metadata_record
from grete.storage.checkpoint_file import BOOTSTRAP_CHECKPOINT, CheckpointError, read_checkpoint
from grete.storage.config import LogConfig
from grete.storage.meta_properties import MetaProperties, MetaPropertiesError, read_meta_properties

log = logging.getLogger(__name__)


def snapshot_policy(config: BrokerConfig) -> SnapshotPolicy:
    return SnapshotPolicy(max_bytes_between=config.get_int("metadata.log.max.record.bytes.between.snapshots"),
                          max_interval_ms=config.get_int("metadata.log.max.snapshot.interval.ms"),
                          retention_bytes=config.get_int("metadata.max.retention.bytes"),
                          retention_ms=config.get_int("metadata.max.retention.ms"))


def metadata_log_config(config: BrokerConfig) -> LogConfig:
    """The metadata log's segments (Kafka's MetadataLogConfig): its own segment size and roll time;
    retention is the snapshots' business, never the segments' own."""
    internal = config.get_str("internal.metadata.log.segment.bytes")
    return LogConfig(segment_bytes=int(internal) if internal else config.get_int("metadata.log.segment.bytes"),
                     segment_ms=config.get_int("metadata.log.segment.ms"), retention_ms=-1, retention_bytes=-1)


def raft_config(config: BrokerConfig) -> RaftConfig:
    return RaftConfig(election_timeout_ms=config.get_int("controller.quorum.election.timeout.ms"),
                      fetch_timeout_ms=config.get_int("controller.quorum.fetch.timeout.ms"),
                      election_backoff_max_ms=config.get_int("controller.quorum.election.backoff.max.ms"),
                      request_timeout_ms=config.get_int("controller.quorum.request.timeout.ms"),
                      retry_backoff_ms=config.get_int("controller.quorum.retry.backoff.ms"))


def formatted_storage(config: BrokerConfig, role: str) -> MetaProperties:
    """The formatted metadata log dir's properties: a controller or a broker of a quorum of several
    does not format itself (every node must share the cluster id the operator chose)."""
    directory = config.metadata_log_dir
    try:
        meta = read_meta_properties(directory)
    except (MetaPropertiesError, OSError) as exc:
        raise StartupError(str(exc)) from None
    if meta is None or not meta.cluster_id:
        raise StartupError(f"No readable meta.properties files found in {directory}: format the {role}'s "
                           "storage first (grete storage format --cluster-id <id> --config <file>)")
    return meta


def formatted_cluster_id(config: BrokerConfig, role: str) -> str:
    cluster_id = formatted_storage(config, role).cluster_id
    assert cluster_id is not None
    return cluster_id


def quorum_of(config: BrokerConfig) -> tuple[dict[int, VoterAddress], dict[int, VoterAddress]]:
    """(static voters, bootstrap servers) from the configuration, or the StartupError Kafka gives."""
    try:
        return quorum_addresses(config.get_list("controller.quorum.voters"),
                                config.get_list("controller.quorum.bootstrap.servers"))
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def controller_broker(config: BrokerConfig) -> Broker:
    """The node's state, with its Raft driver (started by ``start_controller``)."""
    directory = config.metadata_log_dir
    meta = formatted_storage(config, "controller")
    cluster_id = formatted_cluster_id(config, "controller")
    voters, bootstrap = quorum_of(config)
    if voters and config.node_id not in voters:
        raise StartupError(f"node.id {config.node_id} is not among controller.quorum.voters "
                           f"({','.join(str(v) for v in sorted(voters))}): an observer controller is not supported")
    # A dynamic quorum's controller not (yet) in the voter set fetches as an observer until an
    # AddRaftVoter (kafka-metadata-quorum add-controller) makes it a voter.
    local = local_node(config.node_id, meta.directory_id or ZERO_UUID, controller_endpoints(config))
    names = config.get_list("controller.listener.names")
    driver_ref: list[RaftDriver] = []

    async def append(values: list[bytes]) -> int:
        return await driver_ref[0].append(values)
    changing = asyncio.Lock()  # one partition change at a time, topic deletions among them
    store = QuorumMetadataStore(cluster_id, append, changing)
    broker = Broker(config, metadata=store, kraft_version=ControllerKRaftVersion(lambda: driver_ref[0], store.commit,
                                                                              lambda: registry))
    boot = _Bootstrap(store, directory / BOOTSTRAP_CHECKPOINT, config.get_int("min.insync.replicas"))

    registry = BrokerRegistry(cluster_id, config.get_int("broker.session.timeout.ms"), store.commit,
                              lambda: driver_ref[0].log.end_offset, lambda: driver_ref[0].leads,
                              lambda: store.next_producer_id, config.get_bool("grete.fast.failover.enable"))

    def committed(batch: RaftBatch) -> None:
        applied = store.apply_batch(batch)
        for record, offset in applied:
            registry.apply(record, offset)
            partitions.applied(record)
        # Every voter's caches (delegation tokens by HMAC, SCRAM logins, quotas, dynamic configs)
        # follow the log, not only the writer's: a voter that becomes the leader answers from them.
        publish_entity_changes(store.changes, (record for record, _ in applied))
        boot.committed(broker, batch)
    driver = RaftDriver(config.node_id, voters, directory / METADATA_PARTITION_DIR, cluster_id,
                        raft_config(config), committed, listener=names[0] if names else "CONTROLLER",
                        bootstrap=bootstrap, local=local, snapshots=snapshot_policy(config),
                        log_config=metadata_log_config(config))
    driver.leadership_listeners.append(registry.leadership_changed)
    partitions = PartitionControl(store, registry, store.commit, lambda: driver_ref[0].leads, config.raw, changing)

    def loaded(end_offset: int, values: list[bytes]) -> None:
        load_snapshot(store, registry, end_offset, values, partitions.reassigning)
        publish_every_entity(store.changes)
    driver.snapshot_listeners.append(loaded)
    driver.snapshot_source = lambda: snapshot_records(store, registry, partitions.reassigning)
    registry.partitions = partitions
    registry.fenced_listeners.append(partitions.broker_fenced)
    registry.unfenced_listeners.append(partitions.broker_unfenced)
    store.directory_of = registry.directory_of
    store.active = registry.active
    driver_ref.append(driver)
    broker.quorum = driver
    broker.kraft_brokers = registry
    broker.controller_registration = ControllerRegistrar(config, driver, lambda: bootstrapped(store))
    broker.cluster = QuorumCluster(broker, registry, driver, store, partitions)
    broker.controller_only = True
    return broker


def bootstrapped(store: QuorumMetadataStore) -> bool:
    """Whether the quorum's bootstrap records (metadata.version first of all) are applied."""
    return rv.METADATA_VERSION in (store.finalized_features()[1] or {})


class _Bootstrap:
    """Writes the bootstrap records once, when this node's leadership is committed on a log that
    has no metadata records yet (Kafka's ActivationRecordsGenerator for an empty log)."""

    def __init__(self, store: QuorumMetadataStore, path: Path, min_insync_replicas: int) -> None:
        self.store = store
        self.path = path
        self.min_insync_replicas = min_insync_replicas  # this controller's static config
        self.task: asyncio.Task[None] | None = None

    def committed(self, broker: Broker, batch: RaftBatch) -> None:
        driver = broker.quorum
        if (driver is None or not batch.control or self.task is not None or self.store.records_applied
                or driver.raft.role != "Leader" or batch.epoch != driver.raft.epoch):
            return
        self.task = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        path = self.path
        try:
            values = read_checkpoint(path).values if path.exists() else []
        except (CheckpointError, OSError) as exc:
            log.error("cannot read %s: %s; the quorum starts without its bootstrap records", path, exc)
            return
        records = [decode_metadata_record(value)[0] for value in values]
        if any(isinstance(r, FeatureLevelRecord) and r.name == ELR_FEATURE and r.feature_level > 0 for r in records):
            # Eligible leader replicas count on one min ISR for the cluster: Kafka's first controller
            # writes it as the cluster-level config (its ELR safety record), from its static config.
            records += self.store.elr_safety_records(self.min_insync_replicas)
        try:
            await self.store.bootstrap(records)
            log.info("metadata quorum: wrote %d bootstrap records from %s", len(records), path)
        except KafkaError as exc:  # a leadership lost on the way: the next leader writes them
            log.warning("metadata quorum: bootstrap records not written: %s", exc)
