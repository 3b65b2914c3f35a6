"""A partition hosted by this broker: the only way into its ``Log`` and the only writer of its high
watermark.

The partition owns its leader epoch and high watermark; the log owns the offsets it can know by
itself (log start, log end, last stable). Handlers, coordinators and the replica manager go
through the methods here, so the rules replication adds (a high watermark that follows the ISR, not
the leader's log end; appends that keep a leader's offsets on a follower) live in one place.

On a single node the ISR is this broker alone, so the high watermark follows the log end offset as
soon as an append returns. Long-poll fetches park a future here; an append (or a DeleteRecords, or
the partition going away) wakes them: no polling.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import decode_records
from grete.storage.config import LogConfig
from grete.storage.log import AppendResult, Log, ReadResult
from grete.storage.producer_state import ProducerStateEntry

LOG_APPEND_TIME = 1


class Partition:
    __slots__ = ("topic", "index", "topic_id", "_log", "leader_epoch", "_waiters", "online", "is_leader",
                 "leader_id", "partition_epoch")

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, leader_epoch: int, *,
                 is_leader: bool = True, leader_id: int = -1, partition_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self._log = log
        self.leader_epoch = leader_epoch
        self._waiters: list[asyncio.Future[None]] = []
        self.online = True
        # In a cluster, what the controller's last LeaderAndIsr said (a single node always leads).
        self.is_leader = is_leader
        self.leader_id = leader_id
        self.partition_epoch = partition_epoch
        if log.end_offset_for_epoch(leader_epoch)[0] != leader_epoch:
            log.assign_leader_epoch(leader_epoch, log.log_end_offset)
        # The only replica holds everything in its log: the high watermark is the log end at once.
        # (The checkpointed value lags after a crash; left there, reads and coordinator loads would
        # stop short of data that was acknowledged, including offset commits and transaction state.)
        self._set_high_watermark(log.log_end_offset)

    # --- offsets -----------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return int(self._log.high_watermark)

    @property
    def log_start_offset(self) -> int:
        return int(self._log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self._log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        return int(self._log.last_stable_offset)

    def offsets(self) -> tuple[int, int, int, int]:
        """(high watermark, last stable, log start, log end): what an empty Fetch answer depends on."""
        log = self._log
        return (log.high_watermark, log.last_stable_offset, log.log_start_offset, log.log_end_offset)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fetch/ListOffsets/OffsetForLeaderEpoch fencing (KIP-320); -1 means the client has none."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # --- the log's settings and state, read-only ---------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self._log.config

    @property
    def size_bytes(self) -> int:
        return int(self._log.size_bytes)

    @property
    def log_dir(self) -> Path:
        """The log directory (one of ``log.dirs``) this partition's files live in."""
        return self._log.dir.parent

    def replace_log(self, moved: Log) -> None:
        """AlterReplicaLogDirs finished: the partition's log now lives in another dir (same offsets,
        the same bytes); the high watermark carries over."""
        high_watermark = self.high_watermark
        self._log = moved
        self._set_high_watermark(high_watermark)
        self.wake()

    # --- leadership (LeaderAndIsr) --------------------------------------------------------------
    def make_leader(self, leader_epoch: int, partition_epoch: int, leader_id: int) -> None:
        """Kafka's Partition.makeLeader: a new leader epoch starts at the log end offset."""
        if leader_epoch > self.leader_epoch or self._log.end_offset_for_epoch(leader_epoch)[0] != leader_epoch:
            self._log.assign_leader_epoch(leader_epoch, self._log.log_end_offset)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_id = leader_id
        self.is_leader = True
        self._advance_high_watermark()

    def make_follower(self, leader_epoch: int, partition_epoch: int, leader_id: int) -> None:
        """Kafka's Partition.makeFollower: appends stop; parked fetches answer now (and are refused
        as NOT_LEADER_OR_FOLLOWER on their next try)."""
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_id = leader_id
        self.is_leader = False
        self.wake()

    def update_config(self, config: LogConfig) -> None:
        self._log.update_config(config)

    def producers(self) -> list[ProducerStateEntry]:
        return list(self._log.producer_state.producers.values())

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._log.end_offset_for_epoch(epoch)

    # --- writes ------------------------------------------------------------------------------
    def append(self, batch: RecordBatch, now_ms: int) -> AppendResult:
        """Append as leader: the log assigns offsets and stamps this partition's leader epoch."""
        if not self.online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.index} is offline")
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker is not the leader of {self.topic}-{self.index}")
        result = self._log.append(batch, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self._advance_high_watermark()
        return result

    def append_as_follower(self, records: RecordBatch | bytes | memoryview, now_ms: int) -> None:
        """Append a leader's batches as they are (offsets, epochs, timestamps kept); the high
        watermark is not moved here: a follower learns it from the leader's Fetch answers."""
        if not self.online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.index} is offline")
        self._log.append_as_follower(records, now_ms=now_ms)

    def _advance_high_watermark(self) -> None:
        """Single replica: everything appended is replicated. Wakes parked fetches."""
        self._set_high_watermark(self._log.log_end_offset)
        self.wake()

    def _set_high_watermark(self, offset: int) -> None:
        self._log.high_watermark = offset

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset``; the new log start offset."""
        low_watermark = int(self._log.delete_records_before(offset))
        self.wake()
        return low_watermark

    # --- reads -------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, upper_bound: int, min_one: bool) -> ReadResult:
        return self._log.read(offset, max_bytes, upper_bound=upper_bound, min_one=min_one)

    def batches(self, start: int, end: int | None = None) -> Iterator[RecordBatch]:
        return self._log.batches(start, end)

    def committed_batches(self) -> Iterator[RecordBatch]:
        """Every batch from the log start to the high watermark (what a coordinator loads)."""
        return self._log.batches(self._log.log_start_offset, self.high_watermark)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        return self._log.aborted_transactions(start_offset, end_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self._log.offset_for_timestamp(timestamp)

    def offset_of_max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record carrying the log's largest timestamp, exact to the
        record as Kafka 3.7+ answers ListOffsets MAX_TIMESTAMP (KAFKA-16310), not the batch's last
        offset that the segment tracks: the batch holding it is decoded (once per such request)."""
        offset, timestamp = self._log.offset_of_max_timestamp()
        if offset < 0:
            return offset, timestamp
        for batch in self._log.batches(offset, offset + 1):
            if batch.is_control or batch.base_offset > offset or batch.last_offset < offset:
                break
            if batch.timestamp_type == LOG_APPEND_TIME:
                return batch.base_offset, timestamp  # every record carries the append time
            for record in decode_records(batch):
                if batch.base_timestamp + record.timestamp_delta == timestamp:
                    return batch.base_offset + record.offset_delta, timestamp
            break
        return offset, timestamp

    # --- parked fetches ----------------------------------------------------------------------
    def waiter(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    def discard_waiter(self, future: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(future)
        except ValueError:
            pass

    def go_offline(self) -> None:
        """The partition stops serving (deleted, or its log dir failed): parked fetches answer now."""
        self.online = False
        self.wake()
