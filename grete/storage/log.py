"""One partition's log: an ordered list of segments plus the state derived from them. This module
appends (a leader's validated batches, a follower's replicated ones) and reads; the segments
themselves (opening, rolling, flushing, closing, failing) are segmented_log.py's, shrinking the log
(retention, DeleteRecords, truncation) log_retention.py's, reading them log_read.py's."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch, iter_batches
from grete.protocol.records.control import parse_control_record
from grete.storage import log_read
from grete.storage.failure import offline_error
from grete.storage.loader import LogOffline as LogOffline  # re-exported: its old home
from grete.storage.log_read import FileSlice as FileSlice  # re-exported: its old home
from grete.storage.log_read import ReadResult as ReadResult  # re-exported: its old home
from grete.storage.log_retention import LogRetention
from grete.storage.producer_state import CompletedTxn, ProducerStateEntry
from grete.storage.segment import INT32_MAX
from grete.storage.segmented_log import storage_op
from grete.storage.txnindex import AbortedTxn

log = logging.getLogger(__name__)


class UnexpectedAppendOffsetError(ValueError):
    """Kafka's UnexpectedAppendOffsetException: a replicated append starts below the log end
    offset (the follower must truncate, or refetch from its log end, first)."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class OffsetsOutOfOrderError(ValueError):
    """Kafka's OffsetsOutOfOrderException: replicated batches whose offsets do not increase."""


@dataclass(slots=True)  # not frozen: a frozen dataclass costs a microsecond per append to build
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False
    max_timestamp: int = -1
    completed_txn: CompletedTxn | None = None


class Log(LogRetention):
    """Directory ``<topic>-<partition>/`` with:

    * segments ``<base>.log/.index/.timeindex/.txnindex`` (see LogSegment, OffsetIndex, TimeIndex,
      TransactionIndex),
    * ``<offset>.snapshot`` producer-state snapshots (ProducerStateManager),
    * ``leader-epoch-checkpoint`` (LeaderEpochCache),
    * ``partition.metadata``: ``version: 0\\ntopic_id: <22-char URL-safe base64 of the UUID>``.

    All methods are synchronous and meant for one thread (the event loop); the cleaner thread
    only takes ``lock`` to swap finished segments in, which is a handful of renames.
    """

    # ==== appending ===============================================================================
    @storage_op
    def append(self, batch: RecordBatch, *, leader_epoch: int, now_ms: int,
               coordinator_epoch: int | None = None) -> AppendResult:
        """Append one validated client batch (or, if it is a control batch, a broker-built marker).

        Offsets and the leader epoch are patched into the caller's buffer; the bytes go to disk in
        one write. Producer-state violations raise KafkaError before anything is written.
        """
        with self.lock:
            self._ensure_open()
            if batch.is_control:
                return self._append_marker(batch, leader_epoch, now_ms, coordinator_epoch)
            if batch.producer_id >= 0:
                dup = self.producer_state.check(batch)
                if dup is not None:
                    return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp,
                                        self.log_start_offset, True, dup.timestamp)
            return self._write(batch, leader_epoch, now_ms)

    def append_control(self, batch: RecordBatch, *, leader_epoch: int, now_ms: int,
                       coordinator_epoch: int | None = None) -> AppendResult:
        """Append an end-transaction marker batch built by the broker (control + transactional)."""
        if not batch.is_control:
            raise ValueError("append_control needs a control batch")
        return self.append(batch, leader_epoch=leader_epoch, now_ms=now_ms, coordinator_epoch=coordinator_epoch)

    def _append_marker(self, batch: RecordBatch, leader_epoch: int, now_ms: int,
                       coordinator_epoch: int | None) -> AppendResult:
        if coordinator_epoch is None:
            coordinator_epoch = parse_control_record(batch)[1]
        self.producer_state.check_marker(batch, -1 if coordinator_epoch is None else coordinator_epoch)
        return self._write(batch, leader_epoch, now_ms)

    def _write(self, batch: RecordBatch, leader_epoch: int, now_ms: int) -> AppendResult:
        size = batch.size
        if size > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"batch of {size} bytes exceeds segment.bytes {self.config.segment_bytes}")
        base = self.log_end_offset
        last = base + batch.last_offset_delta
        if self.active.should_roll(size, last, now_ms, self.config.segment_bytes,
                                   self.config.segment_ms - self.config.segment_jitter_ms):
            self.roll(now_ms)
        batch.set_base_offset(base)
        batch.set_partition_leader_epoch(leader_epoch)
        append_time = -1
        if self.config.log_append_time and not batch.is_control:
            append_time = now_ms
            batch.set_log_append_time(now_ms)
        seg = self.active
        seg.append(batch.bytes_view(), last, batch.max_timestamp)
        if leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, base)
        done = self.producer_state.update(batch) if batch.producer_id >= 0 else None
        self.producer_state.map_end_offset = last + 1
        if done is not None and done.aborted:
            seg.txn_index.append(self.producer_state.aborted_entry(done))
        self._unflushed_messages += batch.last_offset_delta + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(base, last, append_time, self.log_start_offset, False, batch.max_timestamp, done)

    # ==== appending as a follower =================================================================
    @storage_op
    def append_as_follower(self, records: RecordBatch | bytes | bytearray | memoryview, *,
                           now_ms: int) -> AppendResult:
        """Replication (Kafka's ``UnifiedLog.appendAsFollower``): append batches fetched from the
        leader exactly as it wrote them: base offsets, partition leader epochs, timestamps and CRCs
        are kept. Offsets must increase and start at or past the log end offset (gaps, as compaction
        leaves them, are fine). The leader-epoch cache follows the batches' epochs, producer state
        and the transaction index follow their data and markers (no client checks: the leader made
        them). The high watermark is the broker's (Partition's): it is not touched here.

        Nothing is written unless every batch passes: ``UnexpectedAppendOffsetError``,
        ``OffsetsOutOfOrderError``, KafkaError CORRUPT_MESSAGE or RECORD_LIST_TOO_LARGE otherwise.
        """
        batches = [records] if isinstance(records, RecordBatch) else list(iter_batches(records))
        with self.lock:
            self._ensure_open()
            leo = self.log_end_offset
            if not batches:
                return AppendResult(leo, leo - 1, -1, self.log_start_offset)
            first = batches[0].base_offset
            if first < leo == self.log_start_offset <= batches[-1].last_offset:
                leo = self._start_at_batch(first)
            self._check_follower_batches(batches, leo)
            for batch in batches:
                self._write_replicated(batch, now_ms)
            return AppendResult(batches[0].base_offset, batches[-1].last_offset, -1, self.log_start_offset,
                                False, max(b.max_timestamp for b in batches))

    def _start_at_batch(self, first: int) -> int:
        """Kafka's Partition.appendRecordsToFollowerOrFutureReplica: an empty log was started at the
        leader's log start offset, which falls inside the leader's first batch (DeleteRecords cut
        it): the log starts over at that batch's base offset, so the batch is kept whole (the
        leader's log start is taken again once the high watermark passes it)."""
        log.info("Unexpected offset in append to %s-%d. First offset %d is less than log start offset %d. "
                 "Since this is the first record to be appended to the follower's log, will start the log "
                 "from offset %d.", self.topic, self.partition, first, self.log_start_offset, first)
        self.truncate_fully_and_start_at(first)
        return self.log_end_offset

    def _check_follower_batches(self, batches: list[RecordBatch], leo: int) -> None:
        first = batches[0].base_offset
        if first < leo:
            raise UnexpectedAppendOffsetError(
                f"{self.topic}-{self.partition}: first offset {first} of a replicated append is below "
                f"the log end offset {leo}", first, leo)
        previous_last = first - 1
        for batch in batches:
            if batch.magic != 2 or not batch.crc_ok():
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{self.topic}-{self.partition}: replicated batch at offset "
                                 f"{batch.base_offset} is corrupt (magic {batch.magic})")
            if batch.size > self.config.segment_bytes:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                 f"replicated batch of {batch.size} bytes exceeds segment.bytes "
                                 f"{self.config.segment_bytes}")
            if batch.last_offset_delta < 0 or batch.base_offset <= previous_last:
                raise OffsetsOutOfOrderError(
                    f"{self.topic}-{self.partition}: replicated offsets not increasing: batch "
                    f"[{batch.base_offset}, {batch.last_offset}] after offset {previous_last}")
            previous_last = batch.last_offset

    def _write_replicated(self, batch: RecordBatch, now_ms: int) -> None:
        base, last = batch.base_offset, batch.last_offset
        active = self.active
        if active.should_roll(batch.size, last, now_ms, self.config.segment_bytes,
                              self.config.segment_ms - self.config.segment_jitter_ms):
            self.roll(now_ms)
        if last - self.active.base_offset > INT32_MAX:  # a gap too wide for relative offsets
            self.roll(now_ms, at=base)
        seg = self.active
        seg.append(batch.bytes_view(), last, batch.max_timestamp)
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, base)
        done = self.producer_state.update(batch) if batch.producer_id >= 0 else None
        self.producer_state.map_end_offset = last + 1
        if done is not None and done.aborted:
            seg.txn_index.append(self.producer_state.aborted_entry(done))
        self._unflushed_messages += batch.last_offset_delta + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    # ==== leader epochs ===========================================================================
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    @storage_op
    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        self.epochs.assign(epoch, start_offset)

    # ==== producer state accessors (for the transaction coordinator) ==============================
    def producer(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producer_state.producers.get(producer_id)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return {pid: first for first, pid in self.producer_state.ongoing.items()}

    def last_sequence(self, producer_id: int) -> int:
        entry = self.producer_state.producers.get(producer_id)
        return entry.last_seq if entry is not None else -1


    # ==== reading ==========================================================================
    @storage_op
    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None,
             min_one: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least one batch
        when ``min_one``), never reaching ``upper_bound`` (HW or LSO; default: log end)."""
        with self.lock:
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} is outside [{self.log_start_offset}, {leo}] of "
                                 f"{self.topic}-{self.partition}")
            bound = leo if upper_bound is None else min(upper_bound, leo)
            segments, bases = self.segments, self._bases
        return log_read.read_batches(segments, bases, offset, max_bytes, bound, min_one, self._next_positions)

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
        """Every batch overlapping [start, end), read whole (tests, tools, the cleaner)."""
        if self.offline is not None:
            raise offline_error(self.log_dir, (self.topic, self.partition), self.offline)
        try:
            yield from log_read.batches_between(list(self.segments), start,
                                                self.log_end_offset if end is None else end)
        except OSError as exc:
            raise self.storage_failed(exc) from exc

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted txns overlapping [start_offset, end_offset)."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_txns(start_offset, end_offset)]

    def aborted_txns(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The transaction index's entries of aborted txns overlapping [start_offset, end_offset)."""
        return log_read.aborted_txns_between(self.segments, self._bases, start_offset, end_offset)

    @storage_op
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First (offset, timestamp) with timestamp >= ``timestamp``, or None."""
        with self.lock:
            segments = self.segments
        return log_read.offset_for_timestamp(segments, timestamp, self.log_start_offset)

    @storage_op
    def legacy_offsets_before(self, timestamp: int, max_count: int, now_ms: int) -> list[int]:
        """ListOffsets v0's offsets (log_read.legacy_offsets_before)."""
        with self.lock:
            segments = list(self.segments)
        return log_read.legacy_offsets_before(segments, timestamp, max_count, self.log_start_offset,
                                              self.log_end_offset, now_ms)

    def offset_of_max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the largest timestamp in the log; (-1, -1) if there is none."""
        return log_read.offset_of_max_timestamp(self.segments)
