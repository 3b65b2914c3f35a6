"""Where the coordinator persists group metadata and offsets: the ``__consumer_offsets`` topic.

The coordinator only speaks in key/value byte pairs in Kafka's format (``offsets_format``); the broker
implements ``OffsetsStore`` over its own log:

* ``append(partition, records)`` builds ONE record batch (magic 2, no compression needed, producer id
  -1, CreateTime = now) from the pairs with ``grete.protocol.records.record.build_batch``, appends it to
  partition ``partition`` of ``__consumer_offsets`` and returns once it is durable (written, and
  flushed if the broker flushes on append). A ``None`` value is written as a record with a null value
  (a tombstone), which compaction later removes. On failure it raises ``KafkaError`` with the log's
  code (for example NOT_LEADER_OR_FOLLOWER) or any exception; the coordinator maps it to the error
  Kafka returns.
* ``append_txn(partition, records, producer_id, producer_epoch)`` is the same for TxnOffsetCommit: the
  batch is transactional, with the producer's id and epoch, so the log's producer state fences a
  zombie and the transaction's marker later commits or aborts it.
* ``read(partition)`` yields every record (key, value) of that partition in offset order, from the log
  start to the high watermark, skipping control records and aborted transactional data; committed
  transactional records are yielded where their COMMIT marker is. Records of transactions still open
  at the end are not yielded; ``open_transactions(partition)`` returns them afterwards (producer id ->
  records). Both are called when the partition is loaded (``load()``, or ``load_partition()`` on each
  election); the coordinator pauses between chunks of the iteration, and may stop iterating if the
  partition is unloaded meanwhile (then ``open_transactions`` is not called).

The topic itself must exist with ``offsets.topic.num.partitions`` partitions, cleanup.policy=compact,
and be reported ``is_internal`` in Metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

Record = tuple[bytes, bytes | None]


class OffsetsStore(Protocol):
    async def append(self, partition: int, records: list[Record]) -> None:
        """Append the records as one batch; durable when this returns."""
        ...

    async def append_txn(self, partition: int, records: list[Record], producer_id: int,
                         producer_epoch: int) -> None:
        """Append the records as one transactional batch of this producer."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record of the partition in offset order, for loading at start-up."""
        ...

    def open_transactions(self, partition: int) -> dict[int, list[Record]]:
        """After ``read``: the records of transactions without a marker yet, by producer id."""
        ...


class InMemoryOffsetsStore:
    """An ``OffsetsStore`` kept in lists, for tests: it keeps the bytes exactly as a log would, so a
    new coordinator loading from it exercises the same decoding as a restart."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = {}
        self.batches: list[tuple[int, list[Record]]] = []
        self.open_txns: dict[int, dict[int, list[Record]]] = {}
        self.fail_with: BaseException | None = None  # tests set this to make appends fail
        self.append_delay_s = 0.0  # tests set this to make appends take time, like a disk

    async def append(self, partition: int, records: list[Record]) -> None:
        if self.append_delay_s:
            await asyncio.sleep(self.append_delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        self.partitions.setdefault(partition, []).extend(records)
        self.batches.append((partition, list(records)))

    async def append_txn(self, partition: int, records: list[Record], producer_id: int,
                         producer_epoch: int) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.open_txns.setdefault(partition, {}).setdefault(producer_id, []).extend(records)

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """What a marker does to the log: the producer's open records become visible, or vanish."""
        records = self.open_txns.get(partition, {}).pop(producer_id, [])
        if commit:
            self.partitions.setdefault(partition, []).extend(records)

    def open_transactions(self, partition: int) -> dict[int, list[Record]]:
        return {pid: list(records) for pid, records in self.open_txns.get(partition, {}).items()}

    def read(self, partition: int) -> Iterable[Record]:
        return list(self.partitions.get(partition, []))

    def compact(self) -> None:
        """Keep only the last record per key, and drop tombstones, as log compaction eventually does."""
        for partition, records in self.partitions.items():
            last: dict[bytes, bytes | None] = {}
            for key, value in records:
                last.pop(key, None)
                last[key] = value
            self.partitions[partition] = [(k, v) for k, v in last.items() if v is not None]
