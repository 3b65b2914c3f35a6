"""A grete node: assembles the broker's parts and runs them, in Kafka's start-up order.

Start: log directories (recovery), the replica manager opens the hosted partitions and follows
metadata changes, producer ids, the group and transaction coordinators (loading their partitions),
then the listeners, and last the maintenance loop (retention, checkpoints). Stop: the reverse. A
voter of a KRaft quorum of several (a controller, or a combined node's controller) starts its
listeners and its quorum first and stops last.

The broker's state lives in :class:`~grete.broker.broker.Broker`; this module only wires it to the
outside world, so it is the one place that imports the connection, the coordinators' broker glue
and the broker state together.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grete.broker.broker import Broker
from grete.broker.config import BrokerConfig, ConfigError, StartupError
from grete.broker.groups.coordinators import start_group_coordinator
from grete.broker.network.connection import KafkaConnection
from grete.broker.network.listeners import (
    Listener,
    check_internal_listeners,
    parse_listeners,
    security_protocol,
)
from grete.broker.quotas.connection_quotas import LISTEN_BACKLOG
from grete.broker.requests.pipeline import Pipeline
from grete.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from grete.storage.dir_lock import DirLock, LogDirLockedError, lock_log_dirs, release_all
from grete.storage.failure import KafkaStorageException

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 1.0
CHECKPOINT_INTERVAL_S = 60.0


def _lock_log_dirs(config: BrokerConfig) -> list[DirLock]:
    """Kafka's LogManager.lockLogDirs: a dir another broker holds stops the start (the metadata
    log dir too, on a node that keeps one)."""
    dirs = list(config.log_dirs)
    if not config.get_str("zookeeper.connect") and config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    try:
        return lock_log_dirs(dirs)
    except LogDirLockedError as exc:
        raise StartupError(str(exc)) from None


def _quorum_of_others(config: BrokerConfig) -> bool:
    """Whether a node without ZooKeeper is a voter of a quorum with other voters (a combined node of
    a quorum of several) rather than a quorum of its own; what it cannot be is refused at start with
    the reason, not half-run."""
    roles = set(config.get_list("process.roles"))
    if roles != {"broker", "controller"}:
        raise ConfigError(f"process.roles={','.join(sorted(roles))}: grete runs KRaft as a combined node "
                          "(process.roles=broker,controller), as a controller of a quorum "
                          "(process.roles=controller) or as a broker of one (process.roles=broker)")
    voters = {entry.partition("@")[0].strip() for entry in config.get_list("controller.quorum.voters")}
    if voters:
        return bool(voters - {str(config.node_id)})
    # A dynamic quorum: a node whose only bootstrap server is its own controller listener runs its
    # quorum of one (``kafka-storage format --standalone``); any other server makes it one of several.
    names = {name.upper() for name in config.get_list("controller.listener.names")}
    own = {str(listener.port) for listener in parse_listeners(config.get_list("listeners")) if listener.name in names}
    servers = config.get_list("controller.quorum.bootstrap.servers")
    return len(servers) > 1 or any(server.rpartition(":")[2].strip() not in own for server in servers)


# A node's parts: its membership of a cluster of several (a ZooKeeper cluster's
# grete.broker.cluster.zk_cluster.ZkCluster, a KRaft cluster's grete.broker.quorum.kraft_broker.KRaftBroker;
# each is also the broker's cluster view; None on the embedded node, whose view is a LocalCluster, and on
# a controller), the broker, and the controller of a KRaft quorum of several when the node is one (the
# broker itself on a controller-only node).
Parts = tuple[Any, Broker, Broker | None]


def _new_parts(config: BrokerConfig) -> Parts:
    if not config.get_str("zookeeper.connect"):
        roles = set(config.get_list("process.roles"))
        if roles == {"controller"}:  # loaded by name: the embedded node runs no quorum of several
            check_internal_listeners(config, inter_broker=False, controller=True)
            controller = importlib.import_module("grete.broker.quorum.controller_node").controller_broker(config)
            return None, controller, controller
        if roles == {"broker"}:
            # Loaded by name and only for a KRaft broker, as ZooKeeper's below (the Raft observer,
            # the fetch codec, the authorizer's parts the embedded node does not load at start).
            check_internal_listeners(config, inter_broker=True, controller=True)
            kraft = importlib.import_module("grete.broker.quorum.kraft_broker").KRaftBroker(config)
            return kraft, Broker(config, metadata=kraft.metadata, cluster=kraft, kraft_version=kraft.kraft_version), None
        if _quorum_of_others(config):
            check_internal_listeners(config, inter_broker=True, controller=True)
            controller, membership, broker = importlib.import_module(
                "grete.broker.quorum.combined").combined_node(config)
            return membership, broker, controller
        return None, Broker(config), None
    check_internal_listeners(config, inter_broker=True, controller=False)
    # Loaded by name and only for a cluster: kazoo costs ~30 ms of start-up.
    cluster = importlib.import_module("grete.broker.cluster.zk_cluster")
    zk_broker = cluster.ZkCluster(config)
    return zk_broker, Broker(config, metadata=zk_broker.metadata, cluster=zk_broker), None


class Node:
    def __init__(self, config: BrokerConfig) -> None:
        if config.get_bool("direct.replication.enable") and not config.get_list("direct.transports"):
            raise ConfigError("direct.replication.enable needs a direct transport (direct.transports=shm)")
        # First of all: the broker reads its log dirs as it is built (the metadata file is in the first).
        self.dir_locks = _lock_log_dirs(config)
        try:
            self.membership, self.broker, self.controller = _new_parts(config)
        except BaseException:
            release_all(self.dir_locks)
            raise
        # The steps around every handler, per served broker; the security, quota and metrics work plugs in here.
        self.pipelines = {served: Pipeline(served.metrics, quotas=served.quotas)
                          for served in (self.broker, self.controller) if served is not None}
        self.metrics_server: Any = None  # grete.broker.metrics.metrics_http.MetricsServer when configured
        self.console: Any = None  # grete.broker.console.server.ConsoleServer when configured
        self.servers: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.exit_code = 0  # what `grete serve` exits with: 1 when every log dir failed, as Kafka halts
        self._halting = False  # every log dir failed: stop without asking the controller first
        self.halted_because = ""  # why the node stopped on its own (a failed disk)
        self._halt_task: asyncio.Future[None] | None = None

    @property
    def config(self) -> BrokerConfig:
        return self.broker.config

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        broker = self.broker
        for driver in self._metadata_logs():
            driver.failure_listeners.append(self._halt)
        if self.controller is not None:  # a voter of a quorum of several: the quorum and its listeners
            for listener in self.controller.listeners:
                await self._listen(self.controller, listener)
            assert self.controller.quorum is not None
            self.controller.quorum.start()
            if self.controller.controller_registration is not None:
                self.controller.controller_registration.start()
            if self.controller is broker:  # a controller-only node
                return
        if self.membership is not None:
            await self.membership.connect()  # the cluster id comes from ZooKeeper (KRaft: the format step)
            broker.replicas.on_leadership = self._leadership_changed
            self.membership.serve_replication(broker)
        broker.log_manager.startup(cluster_id=broker.metadata.cluster_id, node_id=broker.node_id)
        broker.replicas.on_all_offline = self._all_dirs_offline
        broker.replicas.start()
        if self.membership is None:
            await broker.ensure_cluster_min_isr()
        await broker.producer_ids.start(lazily=self.membership is not None)
        broker.group_coordinator = await start_group_coordinator(broker)
        if not broker.cluster.replicates:
            broker.share_groups.load(broker.share_coordinator.local_states())
        # After the groups: finishing an interrupted commit may apply transactional offsets.
        broker.start_transactions(self.membership.listener if self.membership is not None else "PLAINTEXT")
        broker.delegation_tokens.start()
        # A cluster's broker binds its listeners now (its registration names their ports) and serves
        # once registered (below; KRaft: and caught up with the metadata log), as Kafka's brokers of
        # 3.9's ZooKeeper mode and 4's KRaft do: one refused as a duplicate never answers a client.
        waiting = self.membership is not None
        for listener in broker.listeners:
            await self._listen(broker, listener, serve=not waiting)
        if broker.config.get_str("metrics.listener"):
            # Loaded by name and only when configured: prometheus-client costs ~40 ms and ~3 MB at
            # start-up, which the embedded node (start <= 0.3 s, idle RSS <= 40 MB) does not pay.
            exposition = importlib.import_module("grete.broker.metrics.metrics_http")
            host, port = exposition.parse_metrics_listener(broker.config.get_str("metrics.listener"))
            self.metrics_server = exposition.MetricsServer(exposition.new_registry(broker), host, port)
            await self.metrics_server.start()
        if broker.config.get_str("console.listener"):
            # Loaded by name and only when configured, as the metrics endpoint (Jinja2, the page).
            self.console = await importlib.import_module("grete.broker.console.server").start_console(broker)
        if broker.config.get_list("direct.transports"):
            # Loaded by name and only when configured (it builds or loads the atomics module).
            service = importlib.import_module("grete.broker.direct.service").DirectService(broker)
            await service.start()
            broker.direct = service
        self._tasks.append(asyncio.ensure_future(self._maintenance_loop()))
        if self.membership is not None:
            self._tasks.append(asyncio.ensure_future(self._isr_expiration_loop()))
            await self.membership.register(broker)  # last: the registration names the bound ports
            for server in self.servers:
                if not server.is_serving():
                    await server.start_serving()

    async def stop(self) -> None:
        broker = self.broker
        if self.membership is not None and not self._halting:
            # While the listeners still serve: the controller moves leadership away first.
            await self.membership.controlled_shutdown()
        for server in self.servers:
            server.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        if self.console is not None:
            self.console.close()
        for conn in list(broker.connections):
            conn.close()
        if self.controller is broker:  # a controller-only node
            await self._stop_controller()
            return
        if broker.direct is not None:
            await broker.direct.stop()
            broker.direct = None
        for task in self._tasks:
            task.cancel()
        broker.producer_ids.stop()
        broker.delegation_tokens.stop()
        broker.share_groups.shutdown()
        groups, transactions = broker.coordinators()
        if transactions is not None:
            transactions.shutdown()
        if broker.txn_verifier is not None:
            broker.txn_verifier.close()
        if groups is not None:
            await groups.shutdown()
        broker.replicas.shutdown()
        # A KRaft broker's clean-shutdown files name its epoch (Kafka's BrokerServer); ZooKeeper
        # brokers and the embedded node write -1, as Kafka 3.9's do.
        kraft = not broker.config.get_str("zookeeper.connect") and broker.cluster.broker_epoch >= 0
        broker.log_manager.shutdown(broker.cluster.broker_epoch if kraft else -1)
        with _failed_dir_reported():
            broker.close_metadata()
        if self.membership is not None:
            with _failed_dir_reported():
                await self.membership.stop()  # the session ends: our registration vanishes at once
        if self.controller is not None:  # a combined node's controller goes last, as in Kafka
            await self._stop_controller()
            return
        release_all(self.dir_locks)
        self._stopped.set()

    async def _stop_controller(self) -> None:
        controller = self.controller
        assert controller is not None and controller.quorum is not None
        for conn in list(controller.connections):
            conn.close()
        if controller.controller_registration is not None:
            await controller.controller_registration.close()
        with _failed_dir_reported():
            await controller.quorum.close()
        release_all(self.dir_locks)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _leadership_changed(self, topic: str, index: int, leader_epoch: int, leads: bool) -> None:
        """The coordinators follow the leadership of their internal partitions (Kafka's
        onLeadershipChange): load when this broker leads one, unload when it stops."""
        groups, transactions = self.broker.coordinators()
        if topic == OFFSETS_TOPIC and groups is not None:
            if leads:
                self._tasks.append(asyncio.ensure_future(groups.load_partition(index, leader_epoch)))
            else:
                groups.unload_partition(index, leader_epoch)
        elif topic == TRANSACTION_STATE_TOPIC and transactions is not None:
            if leads:
                self._tasks.append(asyncio.ensure_future(transactions.load_partition(index, leader_epoch)))
            else:
                transactions.unload_partition(index, leader_epoch)

    def _metadata_logs(self) -> list[Any]:
        """The Raft drivers of the metadata logs this node keeps: a controller's, a KRaft broker's
        (a combined node's two are one); none for the embedded node or a ZooKeeper broker."""
        found = [self.controller.quorum] if self.controller is not None and self.controller.quorum is not None else []
        observer = getattr(self.membership, "driver", None)  # KRaftBroker's; ZooKeeper's membership has none
        if observer is not None and not any(observer is d for d in found):
            found.append(observer)
        return found

    def _all_dirs_offline(self) -> None:
        dirs = ", ".join(f"{d} ({why})" for d, why in self.broker.log_manager.offline_dirs.items())
        self._halt(f"every log dir has failed: {dirs}")

    def _halt(self, why: str) -> None:
        if self._halting:
            return
        log.error("shutting down: %s", why)
        self.halted_because = why
        # Kafka halts here: no controlled shutdown, whose answer (a combined node's own metadata log
        # is in a failed dir) may never come; the session's end tells the controller instead.
        self.exit_code, self._halting = 1, True
        # Not among self._tasks, which stop() cancels: it would cancel itself at its next await.
        self._halt_task = asyncio.ensure_future(self.stop())

    # --- listeners ---------------------------------------------------------------------------
    async def _listen(self, broker: Broker, listener: Listener, serve: bool = True) -> None:
        pipeline = self.pipelines[broker]
        loop = asyncio.get_running_loop()
        protocol = security_protocol(broker.config, listener.name)
        tls_layer, principal_of, sasl = None, None, None
        if protocol in ("SSL", "SASL_SSL"):
            # Loaded by name and only for a TLS listener: `cryptography` costs ~90 ms at start-up.
            tls = importlib.import_module("grete.broker.network.tls")
            reloadable = tls.ListenerTls(broker.config, listener.name)
            broker.listener_tls[listener.name] = reloadable
            tls_layer = reloadable.protocol_factory  # grete.broker.network.tls_offload: crypto off the loop
            # Under SASL_SSL the principal is the SASL one, as in Kafka.
            principal_of = reloadable.principal_of if protocol == "SSL" else None
        if protocol.startswith("SASL_"):
            # Loaded by name and only for a SASL listener (scramp).
            sasl_module = importlib.import_module("grete.broker.security.sasl")
            sasl = sasl_module.listener_sasl(broker.config, listener.name, broker.metadata.scram_credential,
                                             tokens=broker.delegation_tokens.scram_credential)
        def connection() -> KafkaConnection:
            return KafkaConnection(broker, pipeline, listener.name, protocol, principal_of, sasl)
        server = await loop.create_server(
            connection if tls_layer is None else tls_layer(connection),
            listener.host or None, listener.port, reuse_address=True, backlog=LISTEN_BACKLOG, start_serving=False)
        # As Kafka: SO_RCVBUF on the listening socket, before any accept, so that accepted sockets
        # inherit it and their window scale is negotiated for it.
        rcvbuf = broker.config.get_int("socket.receive.buffer.bytes")
        if rcvbuf != -1:
            for sock in server.sockets:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if serve:
            await server.start_serving()
        else:  # listening, not accepting yet: a client's connection waits in the backlog, as on Kafka's
            for sock in server.sockets:  # (asyncio's socket wrapper has no listen(): on a duplicate)
                with socket.socket(fileno=os.dup(sock.fileno())) as same:
                    same.listen(LISTEN_BACKLOG)
        self.servers.append(server)
        port = server.sockets[0].getsockname()[1]
        broker.bound.append(Listener(listener.name, listener.host, port))
        # An advertised port 0 (ephemeral listener) means "whatever we bound".
        broker.advertised = [Listener(a.name, a.host or "localhost", port if a.port == 0 else a.port)
                             if a.name == listener.name else a for a in broker.advertised]

    # --- maintenance -------------------------------------------------------------------------
    async def _isr_expiration_loop(self) -> None:
        """Kafka's isr-expiration task (ReplicaManager): followers that have not caught up for
        ``replica.lag.time.max.ms`` leave the ISR, checked every half of it."""
        while True:
            lag_max_ms = self.config.get_int("replica.lag.time.max.ms")
            await asyncio.sleep(lag_max_ms / 2000)
            try:
                self.broker.replicas.shrink_isrs(int(time.time() * 1000), lag_max_ms)
            except Exception:
                log.exception("ISR expiration check failed")

    async def _maintenance_loop(self) -> None:
        log_manager = self.broker.log_manager
        last_checkpoint = time.monotonic()
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            quiet_since = loop.time() - MAINTENANCE_INTERVAL_S
            for conn in list(self.broker.connections):
                conn.trim(quiet_since)
            try:
                log_manager.maintenance(int(time.time() * 1000))
                if self.broker.direct is not None:
                    self.broker.direct.refresh()  # rolls and retention reach the direct consumers' slots
                if time.monotonic() - last_checkpoint >= CHECKPOINT_INTERVAL_S:
                    log_manager.checkpoint()
                    last_checkpoint = time.monotonic()
            except Exception:
                log.exception("log maintenance failed")


@contextmanager
def _failed_dir_reported() -> Iterator[None]:
    """Closing a log whose dir has failed (already reported when it failed): logged, and the stop
    goes on (a node halting for a failed disk must not hang on it)."""
    try:
        yield
    except KafkaStorageException as exc:
        log.error("closing the metadata log: %s", exc.message)
