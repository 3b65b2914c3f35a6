"""The broker: owns config, metadata, logs, partitions, coordinators and listeners.

Everything mutable is owned by this object and touched only from its event loop thread; the log
cleaner is the one piece of work that runs on another thread (inside grete.storage).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grete.broker.config import BrokerConfig, ConfigError, validate_topic_configs
from grete.broker.partition import Partition
from grete.broker.producer_ids import ProducerIdManager
from grete.coordinator.metadata import LocalMetadataStore, MetadataStore, TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.config import LogConfig
from grete.storage.manager import LogManager

if TYPE_CHECKING:
    from grete.broker.connection import KafkaConnection

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAINTENANCE_INTERVAL_S = 1.0
CHECKPOINT_INTERVAL_S = 60.0
OPEN_CHUNK = 64  # partitions opened per loop step when a topic is created (about 45 ms of work)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(values: list[str]) -> list[Listener]:
    """``NAME://host:port`` entries; an empty host means all interfaces, as in Kafka."""
    listeners = []
    for value in values:
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", value.strip())
        if not match:
            raise ConfigError(f"Invalid listener '{value}': expected NAME://host:port")
        host = match.group(2).strip("[]")
        listeners.append(Listener(match.group(1).upper(), host, int(match.group(3))))
    return listeners


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: INVALID_TOPIC_EXCEPTION with Kafka's wording."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.listeners = parse_listeners(config.list("listeners"))
        advertised = config.list("advertised.listeners")
        self.advertised = parse_listeners(advertised) if advertised else list(self.listeners)
        self.log_dirs = config.log_dirs
        self.metadata: MetadataStore = LocalMetadataStore(self.log_dirs[0], cluster_id=config.raw("cluster.id"))
        self.log_manager = LogManager(self.log_dirs, self._default_log_config())
        self.log_manager.retention_check_interval_ms = config.int("log.retention.check.interval.ms")
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.connections: set[KafkaConnection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.bound: list[Listener] = []
        self.producer_ids = ProducerIdManager(self.metadata)
        self.group_coordinator: Any = None
        self.txn_coordinator: Any = None
        # grete.testing's fault injection (grete/testing/faults.py); None outside tests.
        self.faults: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.started_at = time.monotonic()

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.log_manager.startup(cluster_id=self.metadata.cluster_id, node_id=self.node_id)
        for meta in self.metadata.topics().values():
            for index in meta.partitions:
                self._open_partition(meta, index)
        await self._start_coordinators()
        for listener in self.listeners:
            await self._listen(listener)
        self._tasks.append(asyncio.ensure_future(self._maintenance_loop()))

    async def _listen(self, listener: Listener) -> None:
        from grete.broker.connection import KafkaConnection

        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: KafkaConnection(self, listener.name),
                                          listener.host or None, listener.port, reuse_address=True,
                                          backlog=1024, start_serving=False)
        # As Kafka: SO_RCVBUF on the listening socket, before any accept, so that accepted sockets
        # inherit it and their window scale is negotiated for it.
        rcvbuf = self.config.int("socket.receive.buffer.bytes")
        if rcvbuf != -1:
            for sock in server.sockets:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        await server.start_serving()
        self.servers.append(server)
        port = server.sockets[0].getsockname()[1]
        bound = Listener(listener.name, listener.host, port)
        self.bound.append(bound)
        # An advertised port 0 (ephemeral listener) means "whatever we bound".
        self.advertised = [Listener(a.name, a.host or "localhost", port if a.port == 0 else a.port)
                           if a.name == listener.name else a for a in self.advertised]

    async def _start_coordinators(self) -> None:
        from grete.broker.groups import start_group_coordinator
        from grete.broker.transactions import start_txn_coordinator

        self.group_coordinator = await start_group_coordinator(self)
        # After the groups: finishing an interrupted commit may apply transactional offsets.
        self.txn_coordinator = start_txn_coordinator(self)

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        if self.txn_coordinator is not None:
            self.txn_coordinator.shutdown()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        for partition in self.partitions.values():
            partition.wake()
        self.log_manager.shutdown()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _maintenance_loop(self) -> None:
        last_checkpoint = time.monotonic()
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            try:
                self.log_manager.maintenance(int(time.time() * 1000))
                if time.monotonic() - last_checkpoint >= CHECKPOINT_INTERVAL_S:
                    self.log_manager.checkpoint()
                    last_checkpoint = time.monotonic()
            except Exception:
                log.exception("log maintenance failed")

    # --- topics ------------------------------------------------------------------------------
    def _default_log_config(self) -> LogConfig:
        return LogConfig.from_kafka(self.config.topic_defaults())

    def topic_log_config(self, meta: TopicMeta) -> LogConfig:
        props = self.config.topic_defaults()
        props.update(meta.configs)
        return LogConfig.from_kafka(props)

    def _open_partition(self, meta: TopicMeta, index: int) -> Partition:
        cfg = self.topic_log_config(meta)
        log_ = self.log_manager.get_log(meta.name, index)
        if log_ is None:
            log_ = self.log_manager.create_log(meta.name, index, cfg, meta.topic_id)
        else:
            log_.update_config(cfg)
        partition = Partition(meta.name, index, meta.topic_id, log_, meta.partitions[index].leader_epoch)
        self.partitions[(meta.name, index)] = partition
        return partition

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION as Kafka answers for one it does not host."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return partition

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, *, validate_only: bool = False,
                     internal: bool = False, defer_open: bool = False) -> TopicMeta | None:
        """CreateTopics semantics; -1 means the broker default. Raises KafkaError. With ``defer_open``
        the partitions are registered but not opened: the caller awaits :meth:`open_partitions`."""
        validate_topic_name(name)
        if self.metadata.topic(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        partitions = self.config.int("num.partitions") if num_partitions == -1 else num_partitions
        replication = (self.config.int("default.replication.factor") if replication_factor == -1
                       else replication_factor)
        if partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0.")
        if replication > 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication} larger than available brokers: 1.")
        try:
            clean = validate_topic_configs(configs or {})
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return None
        assignment = {p: [self.node_id] for p in range(partitions)}
        meta = self.metadata.create_topic(name, assignment, clean, internal=internal or name in INTERNAL_TOPICS)
        if not defer_open:
            for index in meta.partitions:
                self._open_partition(meta, index)
        log.info("created topic %s with %d partition(s)", name, partitions)
        return meta

    async def open_partitions(self, meta: TopicMeta, chunk: int = OPEN_CHUNK) -> None:
        """Open a new topic's partitions, yielding to the loop after every ``chunk`` of them: each
        costs ~0.7 ms of file creation, so a 1000-partition topic would otherwise stall every other
        connection for most of a second. Stops if the topic is deleted (or replaced) meanwhile."""
        for n, index in enumerate(sorted(meta.partitions), 1):
            current = self.metadata.topic(meta.name)
            if current is None or current.topic_id != meta.topic_id:
                return
            if (meta.name, index) not in self.partitions:
                self._open_partition(meta, index)
            if n % chunk == 0:
                await asyncio.sleep(0)

    def delete_topic(self, name: str) -> TopicMeta:
        meta = self.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not self.config.bool("delete.topic.enable"):
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
        self.metadata.delete_topic(name)
        for index in meta.partitions:
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                partition.online = False
                partition.wake()
            self.log_manager.delete_log(name, index)
        log.info("deleted topic %s", name)
        return meta

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
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
        meta = self.metadata.add_partitions(name, {p: [self.node_id] for p in range(current, total)})
        for index in range(current, total):
            self._open_partition(meta, index)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's overrides; takes effect live on every partition's log."""
        meta = self.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            clean = validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        self.metadata.set_topic_configs(name, clean)
        cfg = self.topic_log_config(meta)
        for index in meta.partitions:
            partition = self.partitions.get((name, index))
            if partition is not None:
                partition.log.update_config(cfg)

    def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicMeta:
        meta = self.metadata.topic(name)
        if meta is None:
            created = self.create_topic(name, partitions, 1, configs, internal=True)
            assert created is not None
            meta = created
        return meta

    def ensure_offsets_topic(self) -> TopicMeta:
        """``__consumer_offsets``, created on first use with Kafka's settings for it."""
        return self.ensure_internal_topic(OFFSETS_TOPIC, self.config.int("offsets.topic.num.partitions"), {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.int("offsets.topic.segment.bytes")),
        })

    def topic_id_for(self, name: str) -> uuid.UUID | None:
        meta = self.metadata.topic(name)
        return meta.topic_id if meta else None

    @property
    def advertised_listener(self) -> Listener:
        return self.advertised[0]

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def data_dir(self) -> Path:
        return self.log_dirs[0]
