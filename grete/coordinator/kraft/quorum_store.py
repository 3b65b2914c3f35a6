"""The metadata of a controller in a quorum of several voters.

The state is built only from committed batches, in log order, whoever wrote them (a grete or a
Kafka leader): the Raft driver hands each one over once it is below the high watermark, and its
metadata records are applied exactly as a single node replays its own log. A change made here is
encoded as the same records and appended through the quorum's leader; it is applied when it comes
back committed, like everyone else's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.coordinator.metadata import TopicMeta
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import BeginTransactionRecord, EndTransactionRecord, PartitionRecord
from grete.protocol.metadata_frame import decode_metadata_record, encode_metadata_record

# What Kafka's first active controller names the transaction around the bootstrap records.
BOOTSTRAP_TRANSACTION = "Bootstrap records"

Append = Callable[[list[bytes]], Awaitable[int]]
# How long a write waits for a new quorum's bootstrap records before it is answered NOT_CONTROLLER.
ACTIVATION_WAIT_S = 10.0
# Kafka's DirectoryId.UNASSIGNED: a replica whose broker has not said which log dir holds it.
UNASSIGNED_DIRECTORY = ZERO_UUID  # Kafka's DirectoryId.UNASSIGNED


class QuorumMetadataStore(KRaftMetadataStore):
    def __init__(self, cluster_id: str, append: Append, changing: asyncio.Lock | None = None) -> None:  # noqa: D107
        self._init_state(cluster_id)
        self._append = append
        self._activated = asyncio.Event()  # the log holds metadata records (the bootstrap's first)
        # The controller's lock over partition changes (grete/broker/quorum/partitions.py): a topic
        # is removed between them, never while one decided on it is on its way to the log.
        self._changing = changing if changing is not None else asyncio.Lock()
        # broker id -> the log dir its replicas go to (set by the controller from registrations)
        self.directory_of: Callable[[int], uuid.UUID] = lambda _broker: UNASSIGNED_DIRECTORY
        # broker id -> whether it is registered, unfenced and not shutting down (set by the controller)
        self.active: Callable[[int], bool] = lambda _broker: True

    def _partition_records(self, topic_id: uuid.UUID, assignment: dict[int, list[int]]) -> list[Message]:
        """As Kafka's controller writes them: the ISR is the replicas on active brokers (a fenced
        one follows once it is back), led by the first of them; each replica in its broker's log dir
        when the broker registered exactly one, else unassigned (the broker then picks one and says which)."""
        records = super()._partition_records(topic_id, assignment)
        for record in records:
            assert isinstance(record, PartitionRecord)
            record.isr = [replica for replica in record.replicas if self.active(replica)]
            if not record.isr:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Unable to replicate the partition {len(record.replicas)} time(s): All brokers "
                                 f"specified in the partition assignment for partition {record.partition_id} are "
                                 "fenced or in controlled shutdown.")
            record.leader = record.isr[0]
            record.directories = [self.directory_of(replica) for replica in record.replicas]
        return records

    def apply_batch(self, batch: RaftBatch) -> list[tuple[Message, int]]:
        """A committed batch: its metadata records applied (control batches are the quorum's own);
        the records with their offsets, for the controller's other parts."""
        if batch.control:
            return []
        return self.apply_records([(decode_metadata_record(value)[0], batch.base_offset + index)
                                   for index, value in enumerate(batch.records)])

    def load_snapshot(self, end_offset: int, values: list[bytes]) -> list[tuple[Message, int]]:
        """A snapshot's records replace the state (each at the offset before the snapshot's end, the
        last it contains, as a replay of one gives them)."""
        self.reset()
        return self.apply_records([(decode_metadata_record(value)[0], end_offset - 1) for value in values])

    def apply_records(self, records: list[tuple[Message, int]]) -> list[tuple[Message, int]]:
        for record, offset in records:
            self._apply(record, offset)
        if self.records_applied:
            self._activated.set()
        return records

    def partition_record(self, record: PartitionRecord) -> None:
        """A snapshot's PartitionRecord: the directories its records gave, or where the controller
        places replicas when they gave none (a log written before directories were kept)."""
        if len(record.directories) != len(record.replicas):
            record.directories = [self.directory_of(replica) for replica in record.replicas]

    async def _commit(self, records: Sequence[Message], *, bootstrap: bool = False) -> None:
        if records and not bootstrap and not self._activated.is_set():
            # An empty log's first metadata records are the bootstrap records (metadata.version first
            # of all: Kafka's nodes replaying the log stop on anything before it). A write that comes
            # between a new leader's election and them, a broker's registration say, waits for them,
            # as everything waits for the activation records in Kafka's controller.
            try:
                async with asyncio.timeout(ACTIVATION_WAIT_S):
                    await self._activated.wait()
            except TimeoutError:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum has not written its bootstrap records "
                                 "yet") from None
        if records:
            await self._append([encode_metadata_record(record) for record in records])

    async def delete_topic(self, name: str) -> TopicMeta:
        async with self._changing:
            return await super().delete_topic(name)

    async def commit(self, records: Sequence[Message]) -> None:
        """Append ``records`` as one batch through the quorum's leader; done once committed (they
        are applied then, as everyone's)."""
        await self._commit(records)

    async def bootstrap(self, records: Sequence[Message]) -> None:
        """A new quorum's first records, as Kafka's first active controller writes them: the format
        step's feature levels and credentials, in one metadata transaction."""
        await self._commit([BeginTransactionRecord(name=BOOTSTRAP_TRANSACTION), *records, EndTransactionRecord()],
                           bootstrap=True)

    def close(self) -> None:
        """The log is the driver's and closes with it."""
