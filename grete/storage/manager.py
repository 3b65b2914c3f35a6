"""All partition logs of a broker, spread over its log dirs, with the per-dir checkpoint files."""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.topics import METADATA_TOPIC
from grete.storage import io
from grete.storage.cleaner import LogCleaner
from grete.storage.config import LogConfig
from grete.storage.failure import (
    KafkaStorageException,
    LogDirFailureChannel,
    OfflineListener,
    describe,
    offline_error,
)
from grete.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    atomic_write,
    future_dir_name,
    is_deleted_dir,
    parse_future_dir,
    parse_partition_dir,
    partition_dir_name,
    read_offset_checkpoint,
    read_properties,
    read_recovery_point_checkpoint,
    read_replication_offset_checkpoint,
    uuid_from_kafka,
    uuid_to_kafka,
    write_offset_checkpoint,
    write_properties,
)
from grete.storage.future import COPY_CHUNK_BYTES, copy_to_future, promote_orphan_future, swap_in_future
from grete.storage.loader import LogOffline
from grete.storage.log import Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
CHECKPOINT_INTERVAL_MS = 5000


INITIAL_RETENTION_DELAY_MS = 30_000  # Kafka's InitialTaskDelayMs for its retention task


class LogManager:
    """Owns ``log.dirs``. Per directory it keeps (Kafka's names and text formats):

    * ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
      ``replication-offset-checkpoint`` (high watermarks), ``cleaner-offset-checkpoint``: each
      ``0\\n<count>\\n<topic> <partition> <offset>\\n...``, replaced atomically;
    * ``meta.properties``: Java properties, KRaft form ``version=1``, ``cluster.id``,
      ``node.id``, ``directory.id`` (ids as 22-character URL-safe base64);
    * ``.kafka_cleanshutdown``: present only while the broker is cleanly stopped; its absence at
      startup makes every log recover from its recovery point. It holds Kafka's JSON
      ``{"version":0,"brokerEpoch":N}``: a KRaft broker's epoch when it stopped, which it tells the
      controller at its next registration (``previous_broker_epoch``; -1 if a dir lacks the file).

    Each log dir is a unit of failure (Kafka's JBOD, KIP-112): an OSError in one takes it offline
    once (``offline_dirs``, one log line, listeners of ``on_dir_offline``), its logs then raise
    KafkaStorageException at once, and new partitions go to the online dirs only.
    """

    def __init__(self, log_dirs: list[Path], default_config: LogConfig,
                 topic_config: Callable[[str], LogConfig] | None = None) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.topic_config = topic_config
        self.logs: dict[TopicPartition, Log] = {}
        self.offline: dict[TopicPartition, str] = {}  # partitions that failed to load, and why
        self._offline_where: dict[TopicPartition, list[Path]] = {}  # their partition directories
        self.dir_ids: dict[Path, uuid.UUID] = {}
        # The broker epoch every dir's clean-shutdown file named, if they all named the same one.
        self.previous_broker_epoch = -1
        self._clean_epochs: list[int] = []
        self.cleaner_offsets: dict[TopicPartition, int] = {}
        # What each checkpoint file last said: an idle broker does not rewrite unchanged files.
        self._written: dict[Path, dict[TopicPartition, int]] = {}
        self._last_checkpoint_ms = 0
        # log.retention.check.interval.ms (Kafka: 300 s, first check 30 s after start); 0 = every pass.
        self.retention_check_interval_ms = 0
        # cordoned.log.dirs, set by the broker: dirs that take no new replica while another can.
        self.cordoned: set[Path] = set()
        self._next_retention_ms: int | None = None
        self._cleaner: LogCleaner | None = None
        # fsyncs of rolled segments, off the event loop (fsync releases the GIL)
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="grete-log-flush")
        self.failures = LogDirFailureChannel()
        # AlterReplicaLogDirs: partition -> its log being built in another dir
        self.future_logs: dict[TopicPartition, Log] = {}

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_config(topic) if self.topic_config is not None else self.default_config

    # ==== startup =================================================================================
    def startup(self, cluster_id: str | None = None, node_id: int | None = None,
                configs: Mapping[str, LogConfig] | None = None) -> dict[TopicPartition, Log]:
        """Load every partition directory; recover after an unclean shutdown.

        A directory that cannot be read or written goes offline and the others load; with none
        left, KafkaStorageException (Kafka stops the broker then)."""
        self.failures.owner = threading.get_ident()  # listeners run on the thread that runs us
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
                self.dir_ids[d] = ensure_meta(d, cluster_id, node_id)
                self._load_dir(d, configs or {})
            except OSError as exc:
                self.dir_failed(d, exc)
        self._promote_orphan_futures()
        epochs = set(self._clean_epochs)
        if len(epochs) == 1 and len(self._clean_epochs) == len(self.log_dirs):
            self.previous_broker_epoch = epochs.pop()
        if self.all_dirs_offline:
            raise KafkaStorageException(self.log_dirs[0], None,
                                        f"none of the log dirs {[str(d) for d in self.log_dirs]} is usable: "
                                        + "; ".join(f"{d}: {r}" for d, r in self.offline_dirs.items()))
        self.checkpoint()
        return dict(self.logs)

    def _load_dir(self, d: Path, configs: Mapping[str, LogConfig]) -> None:
        marker = d / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            self._clean_epochs.append(_clean_shutdown_epoch(marker))
        recovery = read_recovery_point_checkpoint(d)
        starts = read_offset_checkpoint(d / LOG_START_CHECKPOINT)
        hws = read_replication_offset_checkpoint(d)
        self.cleaner_offsets.update(read_offset_checkpoint(d / CLEANER_CHECKPOINT))
        for name in sorted(io.listdir(d)):
            path = d / name
            if not path.is_dir():
                continue
            if is_deleted_dir(name):
                shutil.rmtree(path, ignore_errors=True)  # a delete interrupted by a crash
                continue
            future = parse_future_dir(name)
            parsed = parse_partition_dir(name) or future
            if parsed is None or parsed[0] == METADATA_TOPIC:  # the quorum owns the metadata log
                continue
            config = configs.get(parsed[0]) or self.config_for(parsed[0])
            # The checkpoints hold current logs only: a future log starts from its own files.
            mine = future is None
            try:
                opened = Log.open(path, config, recovery_point=recovery.get(parsed, 0) if mine else 0,
                                  log_start_offset=starts.get(parsed) if mine else None, clean_shutdown=clean,
                                  high_watermark=hws.get(parsed) if mine else None)
            except (LogOffline, ValueError) as exc:  # this partition only; an OSError is the dir's
                self._partition_offline(parsed, path, str(exc))
                continue
            if not mine:
                self.future_logs[parsed] = self._adopt(opened)
            elif parsed in self.logs or parsed in self.offline:  # two dirs hold it: either could be stale
                opened.close()
                first = self.logs.pop(parsed, None)
                if first is not None:
                    first.close()
                    self._offline_where.setdefault(parsed, []).append(first.dir)
                self._partition_offline(parsed, path, f"a log of it is in more than one log dir (also {d})")
            else:
                self.logs[parsed] = self._adopt(opened)
        # From here on a crash is unclean: the marker only comes back with shutdown().
        if marker.exists():
            io.unlink(marker)

    def _partition_offline(self, key: TopicPartition, path: Path, reason: str) -> None:
        log.error("partition %s-%d offline: %s", key[0], key[1], reason)
        self.offline[key] = reason
        self._offline_where.setdefault(key, []).append(path)

    def _promote_orphan_futures(self) -> None:
        for key in [k for k in self.future_logs if k not in self.logs]:
            future = self.future_logs.pop(key)
            future.close()
            try:
                target = promote_orphan_future(future.dir, *key)
                self.logs[key] = self._adopt(Log.open(target, future.config, clean_shutdown=True,
                                                      high_watermark=future.log_end_offset))
            except OSError as exc:
                self.dir_failed(future.log_dir, exc)

    # ==== partitions =================================================================================
    def create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                   topic_id: uuid.UUID | None = None) -> Log:
        """The partition's log, created in the online dir holding the fewest partitions if it has
        none. A log of an offline dir is returned as it is: its operations raise
        KafkaStorageException (Kafka never recreates such a replica elsewhere by itself)."""
        key = (topic, partition)
        existing = self.logs.get(key)
        if existing is not None:
            return existing
        if key in self.offline:  # it has data that failed to load: never start it afresh elsewhere
            raise KafkaStorageException(self._offline_where[key][0].parent, key,
                                        f"{topic}-{partition} is offline: {self.offline[key]}")
        d = self._emptiest_dir()
        try:
            opened = Log.open(d / partition_dir_name(topic, partition), config or self.config_for(topic),
                              topic_id=topic_id, clean_shutdown=True)
        except OSError as exc:
            self.dir_failed(d, exc)
            raise offline_error(d, key, describe(exc)) from exc
        self.logs[key] = self._adopt(opened)
        return opened

    def _emptiest_dir(self) -> Path:
        """The online log dir holding the fewest partitions, future logs included (Kafka's
        placement). One pass over the logs: counting per dir inside min() made creating a
        1000-partition topic quadratic (1.7 s)."""
        online = self.online_dirs
        if not online:
            raise KafkaStorageException(self.log_dirs[0], None, "no online log dir left")
        # Cordoned dirs (cordoned.log.dirs) take no new replica while another dir can.
        online = [d for d in online if d not in self.cordoned] or online
        if len(online) == 1:
            return online[0]
        counts = Counter(lg.log_dir for lg in [*self.logs.values(), *self.future_logs.values()])
        return min(online, key=lambda p: counts[p])

    def _adopt(self, lg: Log) -> Log:
        lg.on_storage_error = self._log_failed
        return lg

    # ==== offline log dirs ===========================================================================
    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline log dirs and why (one line each)."""
        return self.failures.offline_dirs

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failures.is_offline(d)]

    def cordoned_ids(self) -> list[uuid.UUID]:
        """The directory ids of the cordoned log dirs, as a KRaft broker reports them."""
        return sorted(self.dir_ids[d] for d in self.cordoned if d in self.dir_ids)

    def offline_ids(self) -> list[uuid.UUID]:
        """The directory ids of the failed log dirs, as a KRaft broker's heartbeat reports them."""
        return sorted(self.dir_ids[d] for d in self.offline_dirs if d in self.dir_ids)

    @property
    def all_dirs_offline(self) -> bool:
        """No log dir is left: Kafka shuts the broker down then."""
        return not self.online_dirs

    def on_dir_offline(self, listener: OfflineListener) -> None:
        """Call ``listener(log_dir, error, partitions)`` once per dir that goes offline. It runs on
        the thread that ran startup() (the broker's), at once when the failure happened there,
        else (flusher, cleaner) from the next maintenance()."""
        self.failures.listeners.append(listener)

    def _log_failed(self, lg: Log, exc: OSError) -> None:
        if exc.filename is None:  # pwrite and fsync name no file: say which log's it was
            exc = OSError(exc.errno, exc.strerror, str(lg.dir))
        self.dir_failed(lg.log_dir, exc)

    def dir_failed(self, d: Path, exc: BaseException) -> None:
        """Take ``d`` offline: once, with one log line; its logs stop touching the disk."""
        if not self.failures.mark_offline(d, exc):
            return
        reason = describe(exc)
        mine = [(k, lg) for k, lg in self.logs.items() if lg.log_dir == d]
        futures = [lg for lg in self.future_logs.values() if lg.log_dir == d]
        for _, lg in mine:
            lg.go_offline(reason)
        for lg in futures:
            lg.go_offline(reason)
        partitions = sorted(k for k, _ in mine)
        log.error("Log directory %s is offline: %s (%d partitions now answer KAFKA_STORAGE_ERROR)%s",
                  d, reason, len(partitions), "; no online log dir is left" if self.all_dirs_offline else "")
        self.failures.announce(d, exc, partitions)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def delete_log(self, topic: str, partition: int) -> None:
        """Delete the partition's log (and a future one). KafkaStorageException if its dir is
        offline: the log stays known, so it is not recreated elsewhere."""
        key = (topic, partition)
        found = self.logs.get(key)
        future = self.future_logs.pop(key, None)
        if future is not None and future.offline is None:
            future.delete()
        if found is not None:
            found.delete()
        self.logs.pop(key, None)
        self.cleaner_offsets.pop(key, None)
        if key in self.offline:  # a topic deletion clears a partition that failed to load
            self.offline.pop(key)
            for path in self._offline_where.pop(key, []):
                shutil.rmtree(path, ignore_errors=True)

    # ==== periodic work ===============================================================================
    def maintenance(self, now_ms: int | None = None) -> None:
        """Retention, delayed file deletion, flush-by-time, producer expiry, compaction scheduling,
        and checkpoints every few seconds. Quick: compaction itself runs on the cleaner thread."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.failures.deliver()
        retain = self._retention_due(now)
        for lg in list(self.logs.values()):
            if lg.offline is not None or not lg.maintenance_due(retain):
                continue
            try:
                lg.maintenance(now, retention=retain)
            except KafkaStorageException:
                continue  # its dir just went offline, and said so once
        for lg in list(self.logs.values()):
            if lg.flush_pending is not None and lg.offline is None:
                self._flusher.submit(self._flush_rolled, lg)
        cleaner = self.cleaner()
        cleaner.schedule(now)
        if now - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self.checkpoint()
            self._last_checkpoint_ms = now

    def _retention_due(self, now: int) -> bool:
        interval = self.retention_check_interval_ms
        if interval <= 0:
            return True
        if self._next_retention_ms is None:
            self._next_retention_ms = now + min(interval, INITIAL_RETENTION_DELAY_MS)
        if now < self._next_retention_ms:
            return False
        self._next_retention_ms = now + interval
        return True

    @staticmethod
    def _flush_rolled(lg: Log) -> None:
        try:
            lg.flush_rolled()
        except Exception:
            log.exception("background flush of %s failed", lg)

    def cleaner(self) -> LogCleaner:
        if self._cleaner is None:
            self._cleaner = LogCleaner(self)
        return self._cleaner

    def checkpoint(self) -> None:
        """Each online dir's four offset checkpoints, rewritten when changed (a failed write: dir offline)."""
        by_dir: dict[Path, dict[TopicPartition, Log]] = {}
        for k, lg in self.logs.items():
            by_dir.setdefault(lg.log_dir, {})[k] = lg
        for d in self.online_dirs:
            mine = by_dir.get(d, {})
            try:
                self._write_changed(d / RECOVERY_POINT_CHECKPOINT, {k: lg.recovery_point for k, lg in mine.items()})
                self._write_changed(d / LOG_START_CHECKPOINT,
                                    {k: lg.log_start_offset for k, lg in mine.items() if lg.log_start_offset > 0})
                self._write_changed(d / REPLICATION_CHECKPOINT, {k: lg.high_watermark for k, lg in mine.items()})
                self._write_changed(d / CLEANER_CHECKPOINT, {k: o for k, o in self.cleaner_offsets.items() if k in mine})
            except OSError as exc:
                self.dir_failed(d, exc)

    def _write_changed(self, path: Path, offsets: dict[TopicPartition, int]) -> None:
        if self._written.get(path) != offsets or not path.exists():
            self._written.pop(path, None)  # until written whole: a failed write is written again
            write_offset_checkpoint(path, offsets)
            self._written[path] = offsets

    def flush(self) -> None:
        for lg in self.logs.values():
            if lg.offline is None:
                try:
                    lg.flush()
                except KafkaStorageException:
                    continue  # reported once by its dir

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Stop the cleaner, close every log (flush + snapshot), checkpoint, mark the online dirs
        clean with ``broker_epoch`` (an offline dir recovers at the next start)."""
        if self._cleaner is not None:
            self.cleaner().stop()
        self._flusher.shutdown(wait=True)
        for lg in [*self.logs.values(), *self.future_logs.values()]:
            try:
                lg.close()
            except KafkaStorageException:
                continue
        self.checkpoint()
        for d in self.online_dirs:
            try:
                atomic_write(d / CLEAN_SHUTDOWN_FILE,
                             json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode())
            except OSError as exc:
                self.dir_failed(d, exc)
        self.failures.deliver()

    # ==== moving a partition between log dirs (AlterReplicaLogDirs) ==================================
    def create_future_log(self, topic: str, partition: int, log_dir: Path) -> Log:
        """Start moving the partition to ``log_dir``: an empty ``-future`` log there."""
        key = (topic, partition)
        current = self.logs.get(key)
        d = Path(log_dir)
        if current is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no log of {topic}-{partition}")
        if d not in self.log_dirs:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"{d} is not one of the log dirs")
        if self.failures.is_offline(d):
            raise offline_error(d, key, self.failures.reason(d) or "offline")
        existing = self.future_logs.get(key)
        if existing is not None and existing.log_dir == d:
            return existing
        if existing is not None:
            self.future_logs.pop(key)
            existing.delete()
        if current.log_dir == d:
            raise ValueError(f"{topic}-{partition} is already in {d}")
        try:
            future = Log.open(d / future_dir_name(topic, partition), current.config,
                              topic_id=current.topic_id, clean_shutdown=True,
                              log_start_offset=current.log_start_offset)
        except OSError as exc:
            self.dir_failed(d, exc)
            raise offline_error(d, key, describe(exc)) from exc
        self.future_logs[key] = self._adopt(future)
        return future

    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self.future_logs.get((topic, partition))

    def copy_to_future(self, topic: str, partition: int, max_bytes: int = COPY_CHUNK_BYTES) -> bool:
        """One copy step of the move; True once the future log has caught up."""
        key = (topic, partition)
        return copy_to_future(self.logs[key], self.future_logs[key], max_bytes=max_bytes)

    def replace_current_with_future(self, topic: str, partition: int) -> Log:
        """Finish the move: the caught-up future log becomes the partition's log."""
        key = (topic, partition)
        current, future = self.logs[key], self.future_logs[key]
        try:
            moved = swap_in_future(current, future)
        except OSError as exc:
            failed = future.log_dir if current.closed or current.offline else current.log_dir
            self.dir_failed(failed, exc)
            raise offline_error(failed, key, describe(exc)) from exc
        self.future_logs.pop(key)
        self.logs[key] = self._adopt(moved)
        return moved


def mismatched_node_id(path: Path, stored: object, configured: int) -> str:
    """Kafka's refusal of a log dir formatted for another node."""
    return (f"Stored node id {stored} doesn't match previous node id {configured} in {path}. If you moved your data, "
            "make sure your configured node id matches. If you intend to create a new node, you should remove all "
            "data in your data directories.")


def ensure_meta(d: Path, cluster_id: str | None, node_id: int | None) -> uuid.UUID:
    """Check a log dir's existing meta.properties against this broker, or write a KRaft v1 one;
    the dir's id."""
    path = d / META_PROPERTIES
    props = read_properties(path)
    if props is None:
        dir_id = uuid.uuid4()
        new = {"version": "1"}
        if cluster_id is not None:
            new["cluster.id"] = cluster_id
        if node_id is not None:
            new["node.id"] = str(node_id)
        new["directory.id"] = uuid_to_kafka(dir_id)
        write_properties(path, new)
        return dir_id
    if cluster_id is not None and props.get("cluster.id") not in (None, cluster_id):
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Invalid cluster.id in: {path}. Expected {cluster_id}, "
                         f"but read {props.get('cluster.id')}")  # Kafka's words
    stored_node = props.get("node.id", props.get("broker.id"))
    if node_id is not None and stored_node not in (None, str(node_id)):
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, mismatched_node_id(path, stored_node, node_id))
    raw = props.get("directory.id")
    # An older (v0) file without a directory id is left as it is; the id only lives in memory.
    return uuid_from_kafka(raw) if raw else uuid.uuid4()


def _clean_shutdown_epoch(marker: Path) -> int:
    """The broker epoch a clean-shutdown file names; -1 for an empty or unreadable one (files of
    older versions were empty)."""
    try:
        epoch = json.loads(marker.read_bytes() or b"{}").get("brokerEpoch", -1)
    except (OSError, ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) else -1
