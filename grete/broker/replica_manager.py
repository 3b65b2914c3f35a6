"""The replica manager: owns every partition this broker hosts, and opens, closes and reconfigures
them in response to metadata changes, as a Kafka broker acts on LeaderAndIsr and StopReplica.

Nothing else creates a :class:`Partition`: a request handler that creates a topic changes the
metadata and, if it must answer only once the partitions take writes, awaits :meth:`ready`.

Opening a partition costs ~0.7 ms of file creation, so a large new topic is opened ``OPEN_CHUNK``
partitions per loop step: other connections are served meanwhile (a 1000-partition topic would
otherwise stall every client for most of a second). Internal topics and small topics open in the
step that published them, so the coordinators can write to them at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

from grete.broker.partition import Partition
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore, TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage import KafkaStorageException
from grete.storage.config import LogConfig
from grete.storage.manager import LogManager

log = logging.getLogger(__name__)

OPEN_CHUNK = 64  # partitions opened per loop step when a topic is created (about 45 ms of work)

PartitionKey = tuple[str, int]


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, metadata: MetadataStore,
                 log_config_for: Callable[[TopicMeta], LogConfig]) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.metadata = metadata
        self._log_config_for = log_config_for
        self.partitions: dict[PartitionKey, Partition] = {}
        # Hosted partitions whose log dir failed (KIP-112): their requests get KAFKA_STORAGE_ERROR.
        self.offline: set[PartitionKey] = set()
        self._opening: dict[uuid.UUID, asyncio.Task[None]] = {}
        # Called once when no log dir is left (the node shuts down, as Kafka halts).
        self.on_all_offline: Callable[[], None] | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Open every hosted partition the metadata knows, then follow its changes."""
        self.log_manager.on_dir_offline(self._dir_offline)
        for meta in self.metadata.topics().values():
            for index in meta.partitions:
                self._open(meta, index)
        self.metadata.changes.subscribe(self.on_change)

    def shutdown(self) -> None:
        self.metadata.changes.unsubscribe(self.on_change)
        for task in self._opening.values():
            task.cancel()
        for partition in self.partitions.values():
            partition.wake()

    # --- lookups ---------------------------------------------------------------------------------
    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION as Kafka answers for one it does not host."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            if (topic, index) in self.offline:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index} is in an offline log dir")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return partition

    def is_offline(self, topic: str, index: int) -> bool:
        partition = self.partitions.get((topic, index))
        return (topic, index) in self.offline or (partition is not None and not partition.online)

    async def ready(self, meta: TopicMeta) -> None:
        """Return once every partition of ``meta`` that this broker hosts is open (or the topic is gone)."""
        opening = self._opening.get(meta.topic_id)
        if opening is not None:
            await asyncio.shield(opening)

    # --- metadata changes ------------------------------------------------------------------------
    def on_change(self, change: MetadataChange) -> None:
        meta = change.topic
        if meta is None:
            return
        if change.kind in (ChangeKind.TOPIC_CREATED, ChangeKind.PARTITIONS_ADDED):
            self._open_all(meta, change.partitions)
        elif change.kind is ChangeKind.TOPIC_DELETED:
            self._close_all(meta, change.partitions)
        elif change.kind is ChangeKind.TOPIC_CONFIGS_CHANGED:
            config = self._log_config_for(meta)
            for index in change.partitions:
                found = self.partitions.get((meta.name, index))
                if found is not None:
                    found.update_config(config)

    def _hosted(self, meta: TopicMeta, indexes: tuple[int, ...]) -> list[int]:
        return [i for i in indexes if i in meta.partitions and self.node_id in meta.partitions[i].replicas]

    def _open_all(self, meta: TopicMeta, indexes: tuple[int, ...]) -> None:
        wanted = self._hosted(meta, indexes)
        if meta.internal or len(wanted) <= OPEN_CHUNK:
            for index in wanted:
                self._open(meta, index)
            return
        task = asyncio.ensure_future(self._open_in_chunks(meta, wanted))
        self._opening[meta.topic_id] = task
        task.add_done_callback(lambda _: self._opening.pop(meta.topic_id, None))

    async def _open_in_chunks(self, meta: TopicMeta, indexes: list[int]) -> None:
        for n, index in enumerate(indexes, 1):
            current = self.metadata.topic(meta.name)
            if current is None or current.topic_id != meta.topic_id:
                return  # deleted (or deleted and created again) meanwhile
            if (meta.name, index) not in self.partitions:
                self._open(meta, index)
            if n % OPEN_CHUNK == 0:
                await asyncio.sleep(0)

    def _open(self, meta: TopicMeta, index: int) -> Partition | None:
        config = self._log_config_for(meta)
        try:
            log_ = self.log_manager.get_log(meta.name, index)
            if log_ is None:
                log_ = self.log_manager.create_log(meta.name, index, config, meta.topic_id)
            else:
                log_.update_config(config)
            partition = Partition(meta.name, index, meta.topic_id, log_, meta.partitions[index].leader_epoch)
        except KafkaStorageException as exc:
            # No online dir can hold it, or it failed to load: offline, never recreated empty elsewhere.
            log.error("partition %s-%d is offline: %s", meta.name, index, exc.message)
            self.offline.add((meta.name, index))
            return None
        self.offline.discard((meta.name, index))
        self.partitions[(meta.name, index)] = partition
        return partition

    def _dir_offline(self, log_dir: Path, error: BaseException, partitions: list[PartitionKey]) -> None:
        """A log dir failed (the storage layer logged it once): its partitions stop serving. With no
        dir left the node shuts down, as Kafka does."""
        for key in partitions:
            self.offline.add(key)
            found = self.partitions.get(key)
            if found is not None:
                found.go_offline()
        if self.log_manager.all_dirs_offline and self.on_all_offline is not None:
            self.on_all_offline()

    def _close_all(self, meta: TopicMeta, indexes: tuple[int, ...]) -> None:
        # A chunked opening still under way sees the topic gone before its next chunk and stops.
        for index in indexes:
            partition = self.partitions.pop((meta.name, index), None)
            self.offline.discard((meta.name, index))
            if partition is not None:
                partition.go_offline()
            try:
                self.log_manager.delete_log(meta.name, index)
            except KafkaStorageException as exc:  # its dir is offline: the files stay until it is back
                log.error("could not delete the log of %s-%d: %s", meta.name, index, exc.message)
