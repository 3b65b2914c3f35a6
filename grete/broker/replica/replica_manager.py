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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from grete.broker.quotas.replication_quotas import MeasuredRate, ReplicationQuota
from grete.broker.replica.partition import Partition
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore, TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage import KafkaStorageException
from grete.storage.config import LogConfig
from grete.storage.manager import LogManager

log = logging.getLogger(__name__)

OPEN_CHUNK = 64  # partitions opened per loop step when a topic is created (about 45 ms of work)
MOVE_BACKOFF_S = 1.0  # a throttled move waits this long, as Kafka's fetchers back off (replica.fetch.backoff.ms)

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionOrder:
    """One partition of a LeaderAndIsr: what the controller decided for it."""

    index: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


LeadershipListener = Callable[[str, int, int, bool], None]  # (topic, index, leader epoch, leads now)


class Followers(Protocol):
    """Where followed partitions are fetched from their leaders (the cluster's fetcher manager)."""

    def follow(self, partition: Partition, leader_id: int, endpoint: tuple[str, int] | None) -> None: ...
    def unfollow(self, key: tuple[str, int]) -> None: ...
    def shutdown(self) -> None: ...


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, metadata: MetadataStore,
                 log_config_for: Callable[[TopicMeta], LogConfig], *, cluster: bool = False) -> None:
        self.node_id = node_id
        # In a cluster the controller decides what this broker hosts and leads (LeaderAndIsr,
        # StopReplica); the single node hosts and leads every partition the metadata names.
        self.cluster = cluster
        self.controller_epoch = -1
        self.on_leadership: LeadershipListener | None = None
        self.followers: Followers | None = None  # set by the node in a cluster
        # Replication throttles (KIP-73), the leader's side: what this leader sends lagging followers.
        self.leader_quota: ReplicationQuota | None = None
        # replica.alter.log.dirs.io.max.bytes.per.second: moves between this broker's log dirs.
        self.alter_dirs_quota: MeasuredRate | None = None
        # The cluster's AlterPartition sender: a leader's proposed ISR goes to the controller.
        self.alter_isr: Callable[[Partition, list[int]], None] | None = None
        self.replica_alive: Callable[[int], bool] | None = None  # a broker in the cluster's live set
        self.isr_changed: Callable[[int, int], None] | None = None  # the broker's ISR metrics
        self.log_manager = log_manager
        self.metadata = metadata
        self._log_config_for = log_config_for
        self.partitions: dict[PartitionKey, Partition] = {}
        # Hosted partitions whose log dir failed (KIP-112): their requests get KAFKA_STORAGE_ERROR.
        self.offline: set[PartitionKey] = set()
        self._opening: dict[uuid.UUID, asyncio.Task[None]] = {}
        # Called once when no log dir is left (the node shuts down, as Kafka halts).
        self.on_all_offline: Callable[[], None] | None = None
        self._moves: dict[PartitionKey, asyncio.Task[None]] = {}
        # Told of a replica whose log moved to another dir (a KRaft broker tells its controller).
        self.log_placed: Callable[[Partition], None] | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Open every hosted partition the metadata knows, then follow its changes."""
        self.log_manager.on_dir_offline(self._dir_offline)
        if not self.cluster:
            for meta in self.metadata.topics().values():
                for index in meta.partitions:
                    self._open(meta, index)
        self.metadata.changes.subscribe(self.on_change)
        for key in list(self.log_manager.future_logs):  # moves a restart interrupted go on
            partition = self.partitions.get(key)
            if partition is not None:
                self._start_move(partition)

    def shutdown(self) -> None:
        self.metadata.changes.unsubscribe(self.on_change)
        if self.followers is not None:
            self.followers.shutdown()
        for task in [*self._opening.values(), *self._moves.values()]:
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
            meta = self.metadata.topic(topic)
            if self.cluster and meta is not None and index in meta.partitions:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index} is led by broker "
                                 f"{meta.partitions[index].leader}")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index} is led by broker {partition.leader_id}")
        return partition

    def readable(self, topic: str, index: int, *, from_follower: bool) -> Partition:
        """The partition for a consumer's fetch: the leader, or with ``from_follower`` (Fetch v11+,
        KIP-392) a follower too, which serves up to its own high watermark."""
        if not from_follower:
            return self.partition(topic, index)
        partition = self.partitions.get((topic, index))
        if partition is not None and not partition.is_leader and partition.online and partition.leader_epoch >= 0:
            return partition
        return self.partition(topic, index)

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
        if change.kind is ChangeKind.BROKERS_JOINED:
            for partition in self.partitions.values():
                if partition.is_leader and any(b in partition.replicas for b in change.brokers):
                    partition.recheck_isr_expansion()
            return
        meta = change.topic
        if meta is None:
            return
        if self.cluster and change.kind is not ChangeKind.TOPIC_CONFIGS_CHANGED:
            return  # hosting follows LeaderAndIsr and StopReplica
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

    def reconfigure_all(self) -> None:
        """Broker-level defaults changed (a dynamic config): every partition's effective log config."""
        for (topic, _index), partition in self.partitions.items():
            meta = self.metadata.topic(topic)
            if meta is not None:
                partition.update_config(self._log_config_for(meta))

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

    def _open(self, meta: TopicMeta, index: int, leader_epoch: int | None = None) -> Partition | None:
        config = self._log_config_for(meta)
        try:
            log_ = self.log_manager.get_log(meta.name, index)
            if log_ is None:
                log_ = self.log_manager.create_log(meta.name, index, config, meta.topic_id)
            else:
                log_.update_config(config)
            epoch = meta.partitions[index].leader_epoch if leader_epoch is None else leader_epoch
            if self.cluster:  # leadership and ISR come with the LeaderAndIsr that opens it
                partition = Partition(meta.name, index, meta.topic_id, log_, -1, is_leader=False,
                                      replicated=True, broker_id=self.node_id)
                partition.alter_isr = self.alter_isr
                partition.replica_alive = self.replica_alive
                partition.isr_changed = self.isr_changed
            else:
                partition = Partition(meta.name, index, meta.topic_id, log_, epoch)
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

    # --- the controller's orders (cluster mode) ----------------------------------------------------
    def check_controller_epoch(self, controller_epoch: int) -> bool:
        """False for a request from a controller older than one already heard (STALE_CONTROLLER_EPOCH)."""
        if controller_epoch < self.controller_epoch:
            return False
        self.controller_epoch = controller_epoch
        return True

    def become_leader_or_follower(self, topic: TopicMeta, states: list[PartitionOrder],
                                  leaders: dict[int, tuple[str, int]] | None = None,
                                  now_ms: int = 0) -> dict[int, ErrorCode]:
        """Kafka's ReplicaManager.becomeLeaderOrFollower for one topic: each partition whose leader
        epoch is newer than the one known here is opened if need be and led or followed; the error
        code per partition."""
        errors: dict[int, ErrorCode] = {}
        for order in states:
            key = (topic.name, order.index)
            if key in self.offline:
                errors[order.index] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            partition = self.partitions.get(key)
            if partition is not None and partition.topic_id != topic.topic_id:
                errors[order.index] = ErrorCode.INCONSISTENT_TOPIC_ID
                continue
            if partition is not None and order.leader_epoch <= partition.leader_epoch:
                errors[order.index] = ErrorCode.STALE_CONTROLLER_EPOCH  # already known: ignored, as Kafka does
                continue
            if self.node_id not in order.replicas:
                errors[order.index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if partition is None:
                partition = self._open(topic, order.index, order.leader_epoch)
                if partition is None:
                    errors[order.index] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
            if order.leader == self.node_id:
                if self.followers is not None:
                    self.followers.unfollow(key)
                partition.make_leader(order.leader_epoch, order.partition_epoch, order.leader, order.replicas,
                                      list(order.isr), now_ms)
            else:
                partition.make_follower(order.leader_epoch, order.partition_epoch, order.leader, order.replicas)
                if self.followers is not None and order.leader >= 0:
                    self.followers.follow(partition, order.leader, (leaders or {}).get(order.leader))
                elif self.followers is not None:
                    self.followers.unfollow(key)
            errors[order.index] = ErrorCode.NONE
            if self.on_leadership is not None:
                self.on_leadership(topic.name, order.index, order.leader_epoch, order.leader == self.node_id)
        return errors

    def stop_replica(self, topic: str, index: int, leader_epoch: int, delete: bool) -> ErrorCode:
        """Kafka's StopReplica for one partition: -2 (deletion) and -1 (no epoch) always apply, an
        older leader epoch is FENCED_LEADER_EPOCH."""
        key = (topic, index)
        partition = self.partitions.get(key)
        if partition is not None and leader_epoch >= 0 and leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if self.followers is not None:
            self.followers.unfollow(key)
        if partition is not None:
            if self.on_leadership is not None:
                self.on_leadership(topic, index, max(leader_epoch, partition.leader_epoch), False)
            if delete:
                del self.partitions[key]
                partition.go_offline()
            else:
                partition.make_follower(partition.leader_epoch, partition.partition_epoch, -1)
        if delete:
            self.offline.discard(key)
            try:
                self.log_manager.delete_log(topic, index)
            except KafkaStorageException as exc:
                log.error("could not delete the log of %s-%d: %s", topic, index, exc.message)
                return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def shrink_isrs(self, now_ms: int, lag_max_ms: int) -> None:
        """Kafka's isr-expiration task: each led partition drops followers that stopped catching up."""
        for partition in self.partitions.values():
            if partition.is_leader and len(partition.isr) > 1:
                partition.maybe_shrink_isr(now_ms, lag_max_ms)

    # --- moving a replica between log dirs (AlterReplicaLogDirs) ---------------------------------
    def alter_log_dir(self, topic: str, index: int, log_dir: Path) -> None:
        """Start moving the partition's log to ``log_dir`` (Kafka's ReplicaAlterLogDirsThread): a
        ``-future`` log there is filled a chunk per loop step while the current one keeps taking
        writes, then swapped in. Raises LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR or
        REPLICA_NOT_AVAILABLE as Kafka answers them."""
        if log_dir not in self.log_manager.log_dirs:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {log_dir} is not found in the config.")
        if log_dir in self.log_manager.offline_dirs:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Log directory {log_dir} is offline")
        if (topic, index) in self.offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Partition {topic}-{index} is offline")
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"Replica {topic}-{index} is not on this broker")
        if partition.log_dir == log_dir:
            return  # already there (a move elsewhere in progress is abandoned by the storage layer)
        self.log_manager.create_future_log(topic, index, log_dir)
        self._start_move(partition)

    def _start_move(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        if key in self._moves:
            return
        task = asyncio.ensure_future(self._move(partition))
        self._moves[key] = task

        def done(_: asyncio.Task[None]) -> None:
            self._moves.pop(key, None)
        task.add_done_callback(done)

    async def _move(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        try:
            while self.partitions.get(key) is partition and (future := self.log_manager.get_future_log(*key)) is not None:
                quota = self.alter_dirs_quota
                if quota is not None and quota.exceeded():  # Kafka's alter-log-dirs thread backs off
                    await asyncio.sleep(MOVE_BACKOFF_S)
                    continue
                before = future.size_bytes
                # The last copy step and the swap run in one loop step: no append falls between.
                caught_up = self.log_manager.copy_to_future(*key)
                if quota is not None:
                    quota.record(max(future.size_bytes - before, 0))
                if caught_up:
                    partition.replace_log(self.log_manager.replace_current_with_future(*key))
                    log.info("moved %s-%d to %s", key[0], key[1], partition.log_dir)
                    if self.log_placed is not None:
                        self.log_placed(partition)
                    return
                await asyncio.sleep(0)
        except KafkaError as exc:  # a dir failed under the move: reported once by the storage layer
            log.error("moving %s-%d stopped: %s", key[0], key[1], exc.message)

    def moving(self) -> dict[PartitionKey, tuple[Path, int]]:
        """Replicas being moved: (destination dir, offsets still to copy), for DescribeLogDirs."""
        found = {}
        for key in self._moves:
            future = self.log_manager.get_future_log(*key)
            current = self.partitions.get(key)
            if future is not None and current is not None:
                found[key] = (future.log_dir, max(current.log_end_offset - future.log_end_offset, 0))
        return found
