"""What a hosted partition's log says, read-only: its offsets and settings, leader epochs and
producers, reads (by offset, by timestamp, aborted transactions) and the direct path's view of its
segment files. Partition (partition.py) adds everything that changes the partition."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import decode_records
from grete.storage.config import LogConfig
from grete.storage.log import Log, ReadResult
from grete.storage.producer_state import ProducerStateEntry
from grete.storage.segment import LogSegment
from grete.storage.txnindex import AbortedTxn

LOG_APPEND_TIME = 1

# The log start offset of a partition (a PartitionLogView), read without a Python call: for
# comparing many partitions at once (``map``), as a repeated idle fetch does at its deadline.
log_start_of = operator.attrgetter("_log.log_start_offset")
# (high watermark, log start) of a partition, likewise (what a follower was last told of it).
high_watermark_and_start_of = operator.attrgetter("_log.high_watermark", "_log.log_start_offset")


class PartitionLogView:
    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    # --- offsets ----------------------------------------------------------------------------------
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
        return self._log.offsets()

    # --- the log's settings and state -------------------------------------------------------------
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

    # --- leader epochs and producers --------------------------------------------------------------
    def latest_epoch(self) -> int:
        return int(self._log.epochs.latest_epoch)

    def producers(self) -> list[ProducerStateEntry]:
        return list(self._log.producer_state.producers.values())

    def epoch_of_log_start(self) -> int:
        """The leader epoch of the first offset in the log (ListOffsets EARLIEST answers it)."""
        return int(self._log.epochs.epoch_for_offset(self._log.log_start_offset))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._log.end_offset_for_epoch(epoch)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._log.producer(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0 and entry.epoch == producer_epoch

    # --- reads ------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, upper_bound: int, min_one: bool) -> ReadResult:
        return self._log.read(offset, max_bytes, upper_bound=upper_bound, min_one=min_one)

    def batches(self, start: int, end: int | None = None) -> Iterator[RecordBatch]:
        return self._log.batches(start, end)

    def coordinator_batches(self) -> Iterator[RecordBatch]:
        """Every batch from the log start to the log end: what a coordinator loads when it becomes
        leader of its internal partition. As Kafka's coordinators read (FetchIsolation.LOG_END), not
        to the high watermark: a new leader may not yet know the watermark covers its last writes,
        and its log is the one the followers now truncate to."""
        return self._log.batches(self._log.log_start_offset, self._log.log_end_offset)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        return self._log.aborted_transactions(start_offset, end_offset)

    def aborted_txns(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        return self._log.aborted_txns(start_offset, end_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self._log.offset_for_timestamp(timestamp)

    def legacy_offsets_before(self, timestamp: int, max_count: int, now_ms: int, consumer: bool) -> list[int]:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsForTimestamp); a consumer's with none above the
        high watermark, which takes the place of those."""
        offsets = self._log.legacy_offsets_before(timestamp, max_count, now_ms)
        high_watermark = self.high_watermark
        if consumer and any(offset > high_watermark for offset in offsets):
            return [high_watermark, *(offset for offset in offsets if offset <= high_watermark)]
        return offsets

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

    # --- the direct path's view of the files ------------------------------------------------------
    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment holding ``offset`` (the active one for the log end), or None if below the
        log start (deleted) or beyond the end."""
        log = self._log
        if offset < log.log_start_offset or offset > log.log_end_offset:
            return None
        found = None
        for seg in log.segments:
            if seg.base_offset > offset:
                break
            found = seg
        return found

    def segment_state(self, seg: LogSegment) -> tuple[bool, bool]:
        """(still in the log, still the active segment) of a segment found by ``segment_for``."""
        segments = self._log.segments
        if segments[-1] is seg:
            return True, True
        return any(s is seg for s in segments), False
