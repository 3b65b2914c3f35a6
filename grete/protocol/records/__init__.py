"""Kafka record formats: magic v2 record batches (hot path: header view only), records, legacy
message sets, compression, control records and produce validation.

Import the submodules for anything beyond the batch header view: ``record`` (decode/encode/build),
``compression``, ``control``, ``legacy``, ``validate``. They are not imported here so the hot path
does not pay for them.
"""

from grete.protocol.records.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    RecordBatch,
    increment_sequence,
    iter_batches,
    peek_batch_size,
    peek_magic,
)

__all__ = [
    "BATCH_OVERHEAD", "LOG_OVERHEAD", "RecordBatch", "increment_sequence", "iter_batches",
    "peek_batch_size", "peek_magic",
]
