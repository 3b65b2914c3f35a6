"""A broker's membership of a ZooKeeper cluster, as Kafka 3.9's KafkaServer runs it: connect, create
the top-level paths, agree on the cluster id, register ``/brokers/ids/<id>`` (its czxid is the
broker epoch), run for controller, re-register after a session expiry, and on a clean stop ask the
controller to move leadership away first (controlled shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from grete.broker.cluster.alter_partition import AlterPartitionManager
from grete.broker.cluster.controller import Controller, ControllerSettings
from grete.broker.cluster.fetcher import ReplicaFetcherManager, replication_quota
from grete.broker.cluster.metadata_cache import ZkMetadataCache
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.cluster.share_persister import ClusterSharePersister
from grete.broker.config import BrokerConfig, ConfigError, StartupError
from grete.broker.network.listeners import inter_broker_listener, security_protocol
from grete.broker.security.authorizer import configured
from grete.broker.security.delegation_tokens import tokens_enabled
from grete.coordinator.metadata import ChangeKind, MetadataChange, new_topic_id
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import (
    MultiOpError,
    NodeExistsError,
    Op,
    SessionState,
    ZkClient,
    ZookeeperError,
)
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ControlledShutdownRequest, ControlledShutdownResponse
from grete.storage.files import uuid_to_kafka

if TYPE_CHECKING:
    from grete.broker.broker import Broker

log = logging.getLogger(__name__)
UNCLEAN = "unclean.leader.election.enable"

CONTROLLED_SHUTDOWN_VERSION = 3


class ClusterError(StartupError):
    """The broker cannot join the cluster (ZooKeeper unreachable, id taken, incompatible features)."""


class ZkBroker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        if self.broker_id < 0:
            raise ConfigError("broker.id must be set in a ZooKeeper cluster (generated ids are not supported)")
        session_ms = config.get_int("zookeeper.session.timeout.ms")
        connection_ms = int(config.get_str("zookeeper.connection.timeout.ms") or session_ms)
        self.zk = ZkClient(config.get_str("zookeeper.connect"), session_timeout_ms=session_ms,
                           connection_timeout_ms=connection_ms)
        self.metadata = ZkMetadataCache(self.zk, "", self.broker_id, acls=configured(config),
                                        tokens=tokens_enabled(config))
        self.listener = inter_broker_listener(config)
        self.controller = Controller(self.zk, ControllerSettings(
            self.broker_id, self.listener, config.get_bool("delete.topic.enable"),
            config.get_bool("unclean.leader.election.enable"),
            config.get_int("leader.imbalance.per.broker.percentage")
            if config.get_bool("auto.leader.rebalance.enable") else -1,
            float(config.get_int("leader.imbalance.check.interval.seconds")),
            config.get_bool("grete.fast.failover.enable")))
        self.broker_epoch = -1
        self.fetchers: ReplicaFetcherManager | None = None
        self.alter_partitions: AlterPartitionManager | None = None
        self._broker: Broker | None = None
        self._registration: bytes = b""
        self._session_lost = False

    # --- the cluster view handlers read (Broker.live_brokers, controller_id) -------------------
    def live_brokers(self) -> list[zk.BrokerInfo]:
        return self.metadata.live_brokers()

    def controller_id(self) -> int:
        return self.metadata.controller_id

    # --- start ---------------------------------------------------------------------------------
    async def connect(self) -> str:
        """Connect, create the top-level paths, agree on the cluster id, check /feature; the id."""
        try:
            await self.zk.start()
        except Exception as exc:
            raise ClusterError(str(exc)) from None
        for path in zk.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        cluster_id = await self._cluster_id()
        await self._check_features()
        self.metadata.cluster_id = cluster_id
        await self.metadata.start()
        return cluster_id

    async def _cluster_id(self) -> str:
        found = await self.zk.get(zk.CLUSTER_ID)
        if found is None:
            proposed = self.config.raw("cluster.id") or uuid_to_kafka(new_topic_id())
            try:
                await self.zk.create(zk.CLUSTER_ID, zk.encode_cluster_id(proposed), makepath=True)
                return proposed
            except NodeExistsError:
                found = await self.zk.get(zk.CLUSTER_ID)
                assert found is not None
        return zk.decode_cluster_id(found[0])

    async def _check_features(self) -> None:
        """Kafka's FinalizedFeatureChangeListener: a finalized feature this broker cannot run stops it."""
        found = await self.zk.get(zk.FEATURE)
        if found is None or not found[0]:
            return
        for name, level in zk.decode_feature(found[0]).items():
            lo, hi = zk.SUPPORTED_FEATURES.get(name, (0, 0))
            if not lo <= level <= hi:
                raise ClusterError(f"/feature finalizes {name}={level}, which this broker does not support "
                                   f"(supported {lo}-{hi})")

    def serve_replication(self, broker: Broker) -> None:
        """Wire the replica manager to the cluster: followers fetch from their leaders, leaders send
        their ISR changes to the controller."""
        self.fetchers = ReplicaFetcherManager(
            self.broker_id, self.config, broker.metrics,
            lambda: broker.direct.push_receiver() if broker.direct is not None else None,
            replication_quota(self.broker_id, broker, "follower"))
        self.alter_partitions = AlterPartitionManager(
            self.broker_id, lambda: self.broker_epoch, lambda: self.metadata.broker(self.metadata.controller_id),
            self.listener)
        broker.replicas.followers = self.fetchers
        broker.replicas.leader_quota = replication_quota(self.broker_id, broker, "leader")
        broker.replicas.alter_isr = self.alter_partitions.submit
        broker.replicas.replica_alive = lambda replica: self.metadata.broker(replica) is not None
        # Share partitions' state goes to their share coordinators, wherever those are.
        broker.share_groups.persister = ClusterSharePersister(broker, self.listener)
        broker.log_manager.on_dir_offline(lambda _dir, _error, _partitions: self._tell_dir_failed())

    def _tell_dir_failed(self) -> None:
        """A log dir failed: a log dir event for the controller, which then asks this broker which of
        its replicas are offline (LeaderAndIsr answered KAFKA_STORAGE_ERROR) and moves their
        leaderships (Kafka's propagateLogDirEvent)."""
        async def notify() -> None:
            try:
                await self.zk.create(f"{zk.LOG_DIR_EVENT_NOTIFICATION}/{zk.LOG_DIR_EVENT_PREFIX}",
                                     zk.encode_log_dir_event(self.broker_id), sequence=True, makepath=True)
            except ZookeeperError as exc:  # ZooKeeper away: the controller learns at its next LeaderAndIsr
                log.error("could not tell the controller of the failed log dir: %s", exc)
        asyncio.ensure_future(notify())

    async def register(self, broker: Broker) -> None:
        """Register (after the listeners are bound: the registration names their ports), then run
        for controller."""
        self._broker = broker
        endpoints = tuple(zk.EndPoint(a.name, a.host, a.port, security_protocol(self.config, a.name))
                          for a in broker.advertised)
        info = zk.BrokerInfo(self.broker_id, endpoints, self.config.get_str("broker.rack") or None)
        if info.endpoint(self.listener) is None:
            raise ClusterError(f"inter.broker.listener.name {self.listener} is not one of the advertised "
                               f"listeners {[e.listener for e in endpoints]}")
        await self._check_endpoints_free(info)
        self._registration = zk.encode_broker(info, int(time.time() * 1000))
        await self._register()
        self.zk.on_state(self._on_session_state)
        self.metadata.changes.subscribe(self._on_metadata_change)
        self.controller.startup()

    def _on_metadata_change(self, change: MetadataChange) -> None:
        topic = change.topic
        if (change.kind is ChangeKind.TOPIC_CONFIGS_CHANGED and topic is not None
                and topic.configs.get(UNCLEAN, "").strip().lower() == "true"):
            self.controller.unclean_election_enabled()

    async def _check_endpoints_free(self, info: zk.BrokerInfo) -> None:
        mine = {(e.host, e.port) for e in info.endpoints}
        for child in await self.zk.children(zk.BROKER_IDS):
            found = await self.zk.get(zk.broker_path(int(child)))
            if found is None or int(child) == self.broker_id:
                continue
            other = zk.decode_broker(int(child), found[0])
            taken = mine & {(e.host, e.port) for e in other.endpoints}
            if taken:
                raise ClusterError(f"broker {child} already advertises {sorted(taken)}")

    async def _register(self) -> None:
        path = zk.broker_path(self.broker_id)
        await self._outlive_old_registration(path)
        try:
            # Kafka's two-step multi: the znode ends at version 1, its czxid is the broker epoch.
            results = await self.zk.multi([Op("create", path, b"", ephemeral=True),
                                           Op("set", path, self._registration, 0)])
        except MultiOpError as exc:
            if isinstance(exc.error, NodeExistsError):
                raise ClusterError(f"broker id {self.broker_id} is already registered in ZooKeeper "
                                   f"({self.zk.connect}); is another broker running with this id?") from None
            raise
        self.broker_epoch = results[1].czxid
        log.info("registered broker %d at %s (broker epoch %d)", self.broker_id, path, self.broker_epoch)

    async def _outlive_old_registration(self, path: str) -> None:
        """A broker restarted before ZooKeeper expired its previous session still finds that
        session's registration: wait on a watch until ZooKeeper removes it (Kafka 3.9 exits
        instead). Past the bound, another broker runs with this id. A znode of this session, or
        not ephemeral, is left to the create, which refuses it."""
        stat = await self.zk.exists(path)
        owner = stat.ephemeralOwner if stat is not None else 0
        if owner in (0, self.zk.session_id):
            return
        session_ms = self.config.get_int("zookeeper.session.timeout.ms")
        # Twice the setting: ZooKeeper expires sessions on its tick, and the old run's setting may differ.
        bound_ms = 2 * session_ms
        log.warning("broker id %d is still registered by ZooKeeper session 0x%x (a run of this broker that "
                    "did not stop cleanly?); ZooKeeper removes it when that session expires, at most "
                    "zookeeper.session.timeout.ms=%d ms after it was last heard from: waiting for that, "
                    "up to %d ms, before registering", self.broker_id, owner, session_ms, bound_ms)
        try:
            async with asyncio.timeout(bound_ms / 1000):
                await self.zk.wait_deleted(path)
        except TimeoutError:
            raise ClusterError(f"broker id {self.broker_id} is already registered in ZooKeeper ({self.zk.connect}) "
                               f"and session 0x{owner:x} holding it did not expire within {bound_ms} ms; is "
                               "another broker running with this id?") from None
        log.info("the registration of ZooKeeper session 0x%x is gone; registering broker %d", owner, self.broker_id)

    def _on_session_state(self, state: str) -> None:
        if state == SessionState.LOST:
            log.warning("broker %d: ZooKeeper session expired", self.broker_id)
            self._session_lost = True
            self.controller.session_lost()
        elif state == SessionState.CONNECTED and self._session_lost:
            self._session_lost = False
            asyncio.ensure_future(self._reregister())

    async def _reregister(self) -> None:
        try:
            await self._register()
        except ClusterError as exc:
            log.error("could not register again after the session expired: %s", exc)

    # --- stop ----------------------------------------------------------------------------------
    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move leadership away (Kafka's controlledShutdown); True once no
        partition is led here any more."""
        if not self.config.get_bool("controlled.shutdown.enable") or self.broker_epoch < 0:
            return False
        retries = self.config.get_int("controlled.shutdown.max.retries")
        backoff_s = self.config.get_int("controlled.shutdown.retry.backoff.ms") / 1000
        timeout_s = self.config.get_int("controller.socket.timeout.ms") / 1000
        for attempt in range(retries + 1):
            controller = self.metadata.broker(self.metadata.controller_id)
            endpoint = controller.endpoint(self.listener) if controller is not None else None
            if endpoint is not None:
                peer = PeerConnection(endpoint.host, endpoint.port, f"broker-{self.broker_id}-shutdown",
                                      timeout_s=timeout_s)
                try:
                    response: ControlledShutdownResponse = await peer.call(
                        ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch),
                        CONTROLLED_SHUTDOWN_VERSION)
                    if response.error_code == ErrorCode.NONE and not response.remaining_partitions:
                        log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                        return True
                    log.info("controlled shutdown: error %s, %d partition(s) still led here",
                             ErrorCode(response.error_code).name, len(response.remaining_partitions))
                except PeerError as exc:
                    log.info("controlled shutdown: %s", exc)
                finally:
                    peer.close()
            if attempt < retries:
                await asyncio.sleep(backoff_s)
        log.warning("controlled shutdown of broker %d did not complete; stopping anyway", self.broker_id)
        return False

    async def stop(self) -> None:
        if self.alter_partitions is not None:
            self.alter_partitions.shutdown()
        await self.controller.shutdown()
        await self.zk.close()
