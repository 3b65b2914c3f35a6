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

from grete.broker.partition import Partition
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore, TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
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
        self._opening: dict[uuid.UUID, asyncio.Task[None]] = {}

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Open every hosted partition the metadata knows, then follow its changes."""
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
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return partition

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

    def _open(self, meta: TopicMeta, index: int) -> Partition:
        config = self._log_config_for(meta)
        log_ = self.log_manager.get_log(meta.name, index)
        if log_ is None:
            log_ = self.log_manager.create_log(meta.name, index, config, meta.topic_id)
        else:
            log_.update_config(config)
        partition = Partition(meta.name, index, meta.topic_id, log_, meta.partitions[index].leader_epoch)
        self.partitions[(meta.name, index)] = partition
        return partition

    def _close_all(self, meta: TopicMeta, indexes: tuple[int, ...]) -> None:
        # A chunked opening still under way sees the topic gone before its next chunk and stops.
        for index in indexes:
            partition = self.partitions.pop((meta.name, index), None)
            if partition is not None:
                partition.go_offline()
            self.log_manager.delete_log(meta.name, index)
