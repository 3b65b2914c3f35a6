"""Kafka record formats: magic v2 record batches (hot path: header view only), records, legacy
message sets, compression."""

from grete.protocol.records.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    RecordBatch,
    increment_sequence,
    iter_batches,
    peek_batch_size,
)

__all__ = [
    "BATCH_OVERHEAD", "LOG_OVERHEAD", "RecordBatch", "increment_sequence", "iter_batches",
    "peek_batch_size",
]
