"""Exact record lookups by timestamp (ListOffsets): the one place storage decodes records."""

from __future__ import annotations

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import absolute_records


def exact_offset_for_timestamp(batch: RecordBatch, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record in ``batch`` at or after ``min_offset`` whose
    timestamp is >= ``timestamp``. Kafka decodes the batch for this too; ListOffsets is rare."""
    for record in absolute_records(batch):
        if record.offset >= min_offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None
