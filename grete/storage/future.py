"""Moving a partition to another log dir (AlterReplicaLogDirs, KIP-113), storage part.

A *future* log ``<topic>-<partition>.<uuid>-future`` is created in the destination dir, filled
from the current log with replicated appends (same bytes, offsets and epochs), and once it has
caught up it replaces the current log: the current directory is renamed ``-delete`` and removed
(Kafka's order, so a crash in between leaves only the future log, which startup promotes), then
the future directory takes the partition's plain name.
"""

from __future__ import annotations

import logging
from pathlib import Path

from grete.storage import io
from grete.storage.files import fsync_dir, partition_dir_name
from grete.storage.log import Log

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 1 << 20


def copy_to_future(current: Log, future: Log, *, max_bytes: int = COPY_CHUNK_BYTES, now_ms: int = 0) -> bool:
    """Copy up to ``max_bytes`` of batches the future log lacks; True once it has caught up.

    Like Kafka's ReplicaAlterLogDirsThread it reads up to the current log's end (not the high
    watermark): both logs belong to this broker.
    """
    if future.log_end_offset < current.log_start_offset:  # retention overtook the copy
        future.truncate_fully_and_start_at(current.log_start_offset)
    if future.log_end_offset > current.log_end_offset:  # the current log was truncated meanwhile
        future.truncate_to(current.log_end_offset)
    start = future.log_end_offset
    if start >= current.log_end_offset:
        return True
    data = current.read(start, max_bytes).read_bytes()
    if data:
        future.append_as_follower(data, now_ms=now_ms)
    return future.log_end_offset >= current.log_end_offset


def swap_in_future(current: Log, future: Log) -> Log:
    """Replace ``current`` by the caught-up ``future``; returns the reopened log under its plain
    name in the future's directory. The caller makes sure nothing appends meanwhile."""
    if future.log_end_offset != current.log_end_offset:
        raise ValueError(f"future log of {current.topic}-{current.partition} is at "
                         f"{future.log_end_offset}, the current one at {current.log_end_offset}")
    hw, start = current.high_watermark, current.log_start_offset
    # The current cache is authoritative: it may hold an epoch that no batch carries yet.
    future.epochs.entries = list(current.epochs.entries)
    future.epochs.flush()
    future.close()
    current.delete()
    target = future.log_dir / partition_dir_name(current.topic, current.partition)
    io.rename(future.dir, target)
    fsync_dir(future.log_dir)
    log.info("%s-%d moved from %s to %s", current.topic, current.partition, current.log_dir, future.log_dir)
    return Log.open(target, future.config, topic_id=current.topic_id or future.topic_id,
                    recovery_point=future.log_end_offset, log_start_offset=start, clean_shutdown=True,
                    high_watermark=hw)


def promote_orphan_future(future_dir: Path, topic: str, partition: int) -> Path:
    """A future log without a current one (a crash between the two renames of a swap) becomes
    the partition's log."""
    target = future_dir.parent / partition_dir_name(topic, partition)
    io.rename(future_dir, target)
    fsync_dir(future_dir.parent)
    log.warning("%s: completed an interrupted log-dir move of %s-%d", future_dir, topic, partition)
    return target
