"""All partition logs of a broker, spread over its log dirs, with the per-dir checkpoint files."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.cleaner import LogCleaner
from grete.storage.config import LogConfig
from grete.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    META_PROPERTIES,
    atomic_write,
    is_deleted_dir,
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
    write_recovery_point_checkpoint,
    write_replication_offset_checkpoint,
)
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
      startup makes every log recover from its recovery point.
    """

    def __init__(self, log_dirs: list[Path], default_config: LogConfig,
                 topic_config: Callable[[str], LogConfig] | None = None) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.topic_config = topic_config
        self.logs: dict[TopicPartition, Log] = {}
        self.offline: dict[TopicPartition, str] = {}
        self.dir_ids: dict[Path, uuid.UUID] = {}
        self.cleaner_offsets: dict[TopicPartition, int] = {}
        self._last_checkpoint_ms = 0
        # log.retention.check.interval.ms (Kafka: 300 s, first check 30 s after start); 0 = every pass.
        self.retention_check_interval_ms = 0
        self._next_retention_ms: int | None = None
        self._cleaner: LogCleaner | None = None
        # fsyncs of rolled segments, off the event loop (fsync releases the GIL)
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="grete-log-flush")

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_config(topic) if self.topic_config is not None else self.default_config

    # ==== startup =================================================================================
    def startup(self, cluster_id: str | None = None, node_id: int | None = None,
                configs: Mapping[str, LogConfig] | None = None) -> dict[TopicPartition, Log]:
        """Load every partition directory; recover after an unclean shutdown."""
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            self._ensure_meta(d, cluster_id, node_id)
            self._load_dir(d, configs or {})
        self.checkpoint()
        return dict(self.logs)

    def _ensure_meta(self, d: Path, cluster_id: str | None, node_id: int | None) -> None:
        """Check an existing meta.properties against this broker, or write a KRaft v1 one."""
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
            self.dir_ids[d] = dir_id
            return
        if cluster_id is not None and props.get("cluster.id") not in (None, cluster_id):
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{path}: cluster.id {props.get('cluster.id')} does not match {cluster_id}")
        stored_node = props.get("node.id", props.get("broker.id"))
        if node_id is not None and stored_node not in (None, str(node_id)):
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: node.id {stored_node} does not match {node_id}")
        raw = props.get("directory.id")
        # An older (v0) file without a directory id is left as it is; the id only lives in memory.
        self.dir_ids[d] = uuid_from_kafka(raw) if raw else uuid.uuid4()

    def _load_dir(self, d: Path, configs: Mapping[str, LogConfig]) -> None:
        marker = d / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery = read_recovery_point_checkpoint(d)
        starts = read_offset_checkpoint(d / LOG_START_CHECKPOINT)
        hws = read_replication_offset_checkpoint(d)
        self.cleaner_offsets.update(read_offset_checkpoint(d / CLEANER_CHECKPOINT))
        for name in sorted(os.listdir(d)):
            path = d / name
            if not path.is_dir():
                continue
            if is_deleted_dir(name):
                shutil.rmtree(path, ignore_errors=True)  # a delete interrupted by a crash
                continue
            parsed = parse_partition_dir(name)
            if parsed is None:
                continue
            config = configs.get(parsed[0]) or self.config_for(parsed[0])
            try:
                opened = Log.open(path, config, recovery_point=recovery.get(parsed, 0),
                                  log_start_offset=starts.get(parsed), clean_shutdown=clean,
                                  high_watermark=hws.get(parsed))
            except (LogOffline, OSError, ValueError) as exc:
                log.error("partition %s-%d offline: %s", parsed[0], parsed[1], exc)
                self.offline[parsed] = str(exc)
                continue
            self.logs[parsed] = opened
        # From here on a crash is unclean: the marker only comes back with shutdown().
        marker.unlink(missing_ok=True)

    # ==== partitions =================================================================================
    def create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                   topic_id: uuid.UUID | None = None) -> Log:
        key = (topic, partition)
        existing = self.logs.get(key)
        if existing is not None:
            return existing
        d = self._emptiest_dir()
        opened = Log.open(d / partition_dir_name(topic, partition), config or self.config_for(topic),
                          topic_id=topic_id, clean_shutdown=True)
        self.logs[key] = opened
        return opened

    def _emptiest_dir(self) -> Path:
        """The log dir holding the fewest partitions (Kafka's placement). One pass over the logs:
        counting per dir inside min() made creating a 1000-partition topic quadratic (1.7 s)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = Counter(lg.dir.parent for lg in self.logs.values())
        return min(self.log_dirs, key=lambda p: counts[p])

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def delete_log(self, topic: str, partition: int) -> None:
        found = self.logs.pop((topic, partition), None)
        self.cleaner_offsets.pop((topic, partition), None)
        if found is not None:
            found.delete()

    # ==== periodic work ===============================================================================
    def maintenance(self, now_ms: int | None = None) -> None:
        """Retention, delayed file deletion, flush-by-time, producer expiry, compaction scheduling,
        and checkpoints every few seconds. Quick: compaction itself runs on the cleaner thread."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        retain = self._retention_due(now)
        for lg in list(self.logs.values()):
            try:
                lg.maintenance(now, retention=retain)
            except OSError as exc:
                log.error("maintenance of %s failed: %s", lg, exc)
        for lg in list(self.logs.values()):
            if lg.flush_pending is not None:
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
        for d in self.log_dirs:
            mine = {k: lg for k, lg in self.logs.items() if lg.dir.parent == d}
            write_recovery_point_checkpoint(d, {k: lg.recovery_point for k, lg in mine.items()})
            write_offset_checkpoint(d / LOG_START_CHECKPOINT,
                                    {k: lg.log_start_offset for k, lg in mine.items() if lg.log_start_offset > 0})
            write_replication_offset_checkpoint(d, {k: lg.high_watermark for k, lg in mine.items()})
            write_offset_checkpoint(d / CLEANER_CHECKPOINT,
                                    {k: o for k, o in self.cleaner_offsets.items() if k in mine})

    def flush(self) -> None:
        for lg in self.logs.values():
            lg.flush()

    def shutdown(self) -> None:
        """Stop the cleaner, close every log (flush + snapshot), checkpoint, mark the dirs clean."""
        if self._cleaner is not None:
            self.cleaner().stop()
        self._flusher.shutdown(wait=True)
        for lg in self.logs.values():
            lg.close()
        self.checkpoint()
        for d in self.log_dirs:
            atomic_write(d / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": -1}).encode())

