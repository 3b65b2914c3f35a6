"""The metadata of a controller in a quorum of several voters.

The state is built only from committed batches, in log order, whoever wrote them (a grete or a
Kafka leader): the Raft driver hands each one over once it is below the high watermark, and its
metadata records are applied exactly as a single node replays its own log. A change made here is
encoded as the same records and appended through the quorum's leader; it is applied when it comes
back committed, like everyone else's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.protocol.codec import Message
from grete.protocol.metadata import BeginTransactionRecord, EndTransactionRecord
from grete.protocol.metadata_frame import decode_metadata_record, encode_metadata_record

# What Kafka's first active controller names the transaction around the bootstrap records.
BOOTSTRAP_TRANSACTION = "Bootstrap records"

Append = Callable[[list[bytes]], Awaitable[int]]


class QuorumMetadataStore(KRaftMetadataStore):
    def __init__(self, cluster_id: str, append: Append) -> None:  # noqa: D107 - the module says it
        self._init_state(cluster_id)
        self._append = append

    def apply_batch(self, batch: RaftBatch) -> None:
        """A committed batch: its metadata records applied (control batches are the quorum's own)."""
        if batch.control:
            return
        for index, value in enumerate(batch.records):
            record, _version = decode_metadata_record(value)
            self._apply(record, batch.base_offset + index)

    async def _commit(self, records: Sequence[Message]) -> None:
        if records:
            await self._append([encode_metadata_record(record) for record in records])

    async def bootstrap(self, records: Sequence[Message]) -> None:
        """A new quorum's first records, as Kafka's first active controller writes them: the format
        step's feature levels and credentials, in one metadata transaction."""
        await self._commit([BeginTransactionRecord(name=BOOTSTRAP_TRANSACTION), *records, EndTransactionRecord()])

    def close(self) -> None:
        """The log is the driver's and closes with it."""
