"""The data plane's append path (Kafka's ReplicaManager.appendRecords): one partition's batch
validated and appended, transactional batches routed through KIP-890's checks, and the delayed
produce that answers acks=all once the ISR has what was appended. Produce, WriteTxnMarkers and the
direct path all write through here.

No per-record Python on this path: ``validate_produce_records`` reads the 61-byte header and runs
CRC32C in C; records are decoded only where semantics need it (compacted topics need keys,
configured timestamp bounds, or ``grete.produce.validation=full``). Produce v0-2 carry legacy
message sets, which are up-converted to one v2 batch (Kafka 4.x rejects them; old clients still
send them).

What the path needs of the rest of the broker (its transaction coordinator, where another broker's
coordinator is, the produce metrics) comes in as the small protocols below.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from grete.broker.config import LONG_MAX, BrokerConfig
from grete.broker.replica.partition import Partition
from grete.broker.replica.txn_verification import (
    ABORTABLE_PRODUCE_VERSION,
    ADD_PARTITION_PRODUCE_VERSION,
    TopicPartition,
    TxnVerifier,
    produce_error,
)
from grete.broker.replica.verification_guards import VerificationGuard
from grete.coordinator.transactions.txn_commit import TV2
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ProduceResponse
from grete.protocol.records.batch import BATCH_OVERHEAD, RecordBatch
from grete.protocol.records.validate import RecordValidationError, validate_produce_records
from grete.protocol.topics import INTERNAL_TOPICS

if TYPE_CHECKING:  # loaded on first use (docs/architecture.md): the append path only calls it
    from grete.coordinator.transactions.txn import TransactionCoordinator

PartitionResponse = ProduceResponse.PartitionProduceResponse

# acks=all in a cluster: (the partition's answer, its partition, the offset the ISR must reach)
Replicating = tuple[PartitionResponse, Partition, int]


class Partitions(Protocol):
    """The hosted partitions (the replica manager)."""

    def partition(self, topic: str, index: int) -> Partition:
        """The partition this broker leads, or the KafkaError Kafka answers for it."""
        ...


class Transactions(Protocol):
    """Where a transactional batch is checked (the broker provides it): this broker's transaction
    coordinator, or through ``txn_verifier`` the one on the broker leading its transactional id's
    ``__transaction_state`` partition."""

    @property
    def node_id(self) -> int: ...
    @property
    def config(self) -> BrokerConfig: ...  # transaction.partition.verification.enable is dynamic
    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...
    @property
    def txn_verifier(self) -> TxnVerifier | None: ...
    def coordinates_transactions_of(self, transactional_id: str | None) -> bool: ...
    def txn_coordinator_node(self, transactional_id: str) -> int | None: ...


class ProduceMetrics(Protocol):
    """Kafka's per-topic BytesIn/MessagesIn and FailedProduceRequests counters."""

    def produced(self, topic: str, records: int, nbytes: int) -> None: ...
    def produce_failed(self, topic: str, nbytes: int) -> None: ...


@dataclass
class Verifying:
    """A transactional batch parked until the coordinator on another broker has confirmed (or
    added) its partition; ``answer`` is its slot in the response, filled in then."""

    answer: PartitionResponse
    partition: Partition
    batch: RecordBatch
    guard: VerificationGuard
    size: int
    refusal: PartitionResponse | None = None  # the records were refused: answered once added


async def delayed_produce(pending: Sequence[tuple[Partition, int]], timeout_ms: int) -> list[ErrorCode]:
    """Kafka's DelayedProduce: each partition's outcome once its high watermark has reached the
    offset (parked futures on the partitions, no polling), or REQUEST_TIMED_OUT after ``timeout_ms``
    (see :meth:`Partition.wait_for_replication` for the other outcomes)."""
    return list(await asyncio.gather(*(partition.wait_for_replication(offset, timeout_ms)
                                       for partition, offset in pending)))


class Appends:
    """The append path over the replica manager's partitions."""

    def __init__(self, replicas: Partitions, transactions: Transactions, metrics: ProduceMetrics, *,
                 full_validation: bool = False) -> None:
        self.replicas = replicas
        self.transactions = transactions
        self.metrics = metrics
        self.full_validation = full_validation  # grete.produce.validation=full: every record read

    def append_records(self, version: int, topic: str, index: int, records: object, acks: int, now_ms: int,
                       replicating: list[Replicating], transactional_id: str | None = None,
                       verifying: list[Verifying] | None = None) -> PartitionResponse:
        """One partition's produce: validate, append, answer. An acks=all append to a replicated
        partition joins ``replicating`` (answer it with :meth:`await_replication`). A transactional
        batch whose coordinator is on another broker is not appended here but parked in
        ``verifying`` (:meth:`append_verified` appends it); without that list, as on the direct
        path, it is appended unverified."""
        try:
            if acks not in (-1, 0, 1):
                raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
            if topic in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Cannot append to internal topic {topic}")
            partition = self.replicas.partition(topic, index)
            if acks == -1 and _transactional_header(records) is None:
                # Kafka checks the ISR before it validates the records (Partition.appendRecordsToLeader):
                # a batch that would be refused too is answered the retriable NOT_ENOUGH_REPLICAS. A
                # transactional batch is verified first (below), as Kafka's ReplicaManager does.
                partition.check_enough_replicas()
            cfg = partition.config
            # A bound into the past needs every record read; the future bound alone (Kafka 4's default,
            # 1 h) is checked on the batch header unless the header shows a record may break it.
            bounded = cfg.message_timestamp_before_max_ms != LONG_MAX
            if records is not None and not isinstance(records, bytes | bytearray | memoryview):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "records not received as bytes")
            batch = validate_produce_records(
                records, produce_version=version, compacted=cfg.compact,
                max_message_bytes=cfg.max_message_bytes, timestamp_type=cfg.message_timestamp_type,
                timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
                timestamp_after_max_ms=cfg.message_timestamp_after_max_ms, now_ms=now_ms,
                deep=self.full_validation or cfg.compact or bounded,
                topic_partition=f"{topic}-{index}" if cfg.compact else "")  # named by a keyless record's error
            if batch.is_transactional:
                parked = self._route_transactional(partition, batch, version, acks, now_ms, records,
                                                   transactional_id, verifying)
                if parked is not None:
                    return parked
            if acks == -1 and batch.is_transactional:
                partition.check_enough_replicas()
            result = partition.append(batch, now_ms)
            self.metrics.produced(topic, batch.records_count, batch.size)
        except RecordValidationError as exc:
            self.metrics.produce_failed(topic, _records_bytes(records))
            refused = partition_error(exc, index, [ProduceResponse.BatchIndexAndErrorMessage(
                batch_index=i, batch_index_error_message=message) for i, message in exc.record_errors])
            return self._added_then_refused(partition, refused, version, acks, now_ms, records, transactional_id,
                                            verifying)
        except KafkaError as exc:
            self.metrics.produce_failed(topic, _records_bytes(records))
            return partition_error(exc, index)
        answer = PartitionResponse(index=index, error_code=0, base_offset=result.base_offset,
                                   log_append_time_ms=result.log_append_time,
                                   log_start_offset=result.log_start_offset)
        if acks == -1 and partition.has_followers:
            replicating.append((answer, partition, result.last_offset + 1))
        return answer

    def _route_transactional(self, partition: Partition, batch: RecordBatch, version: int, acks: int, now_ms: int,
                             records: object, transactional_id: str | None,
                             verifying: list[Verifying] | None) -> PartitionResponse | None:
        """KIP-890 for a transactional batch: checked against (or, v12+, added to) this broker's
        coordinator, or parked in ``verifying`` for the coordinator on another broker (its answer
        slot returned). None: append it now. Raises KafkaError."""
        txns = self.transactions
        topic, index = partition.topic, partition.index
        if txns.coordinates_transactions_of(transactional_id):
            if version >= ADD_PARTITION_PRODUCE_VERSION:
                self._add_to_transaction(batch, transactional_id, topic, index)
            else:
                self._verify_transaction(batch, topic, index, version)
            return None
        if verifying is None or transactional_id is None or not (
                version >= ADD_PARTITION_PRODUCE_VERSION or txns.config.get_bool("transaction.partition.verification.enable")):
            return None
        if not partition.is_leader:  # refused now, not after a round trip to the coordinator
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"this broker is not the leader of {topic}-{index}")
        guard = partition.start_verification(batch.producer_id, batch.producer_epoch, now_ms, batch.base_sequence,
                                             version >= ADD_PARTITION_PRODUCE_VERSION)
        if guard is None:
            return None
        if acks == -1:
            partition.check_enough_replicas()
        parked = PartitionResponse(index=index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                                   log_start_offset=-1)
        # The batch is a view of the connection's receive buffer, which is reused once the request
        # is answered: a parked batch keeps a copy of its own.
        kept = RecordBatch(bytearray(batch.bytes_view()))
        verifying.append(Verifying(parked, partition, kept, guard, _records_bytes(records)))
        return parked

    def _added_then_refused(self, partition: Partition, refused: PartitionResponse, version: int, acks: int,
                            now_ms: int, records: object, transactional_id: str | None,
                            verifying: list[Verifying] | None) -> PartitionResponse:
        """Kafka adds a v12+ transactional batch's partition to its transaction before the records
        are validated (ReplicaManager verifies first), so a transaction whose first batch is refused
        has begun all the same, and its abort writes markers. ``refused`` is answered once the
        partition is added (parked with the batch when the coordinator is on another broker); a
        failed add is answered instead."""
        header = _transactional_header(records)
        if version < ADD_PARTITION_PRODUCE_VERSION or header is None or transactional_id is None:
            return refused
        try:
            parked = self._route_transactional(partition, header, version, acks, now_ms, records, transactional_id,
                                               verifying)
        except KafkaError as exc:
            return partition_error(exc, partition.index)
        if parked is None or verifying is None:
            return refused
        verifying[-1].refusal = refused
        return parked

    def _verify_transaction(self, batch: RecordBatch, topic: str, index: int, version: int) -> None:
        """A transactional batch is accepted only into a partition its transaction added (KIP-890).
        A batch outside its transaction is TRANSACTION_ABORTABLE to a client that knows that code
        (v11+, Kafka's genericErrorSupported), INVALID_TXN_STATE before."""
        error = self.transactions.txn_coordinator.verify_partition(batch.producer_id, batch.producer_epoch,
                                                                   (topic, index))
        if error == ErrorCode.INVALID_TXN_STATE and version >= ABORTABLE_PRODUCE_VERSION:
            error = ErrorCode.TRANSACTION_ABORTABLE
        if error:
            raise KafkaError(error, f"producer {batch.producer_id} has no ongoing transaction with {topic}-{index}")

    def _add_to_transaction(self, batch: RecordBatch, transactional_id: str | None, topic: str, index: int) -> None:
        """From v12 (Kafka's ADD_PARTITION operation) the batch adds its partition to its producer's
        transaction, as AddPartitionsToTxn would, instead of only being checked against it."""
        error = self.transactions.txn_coordinator.add_partitions(transactional_id or "", batch.producer_id,
                                                                 batch.producer_epoch, [(topic, index)], TV2)
        if error == ErrorCode.PRODUCER_FENCED:
            error = ErrorCode.INVALID_PRODUCER_EPOCH  # as Kafka's AddPartitionsToTxnManager converts it
        if error:
            raise KafkaError(error, f"producer {batch.producer_id} could not add {topic}-{index} to its transaction")

    async def append_verified(self, version: int, transactional_id: str, acks: int, verifying: list[Verifying],
                              replicating: list[Replicating]) -> bool:
        """KIP-890 part 1 across brokers: ask the transaction's coordinator about the parked batches'
        partitions (one request for them all), then append those it confirmed, each only while its
        verification guard still stands (a marker written meanwhile ends the guard). Fills in each
        parked answer; True if any was refused."""
        add = version >= ADD_PARTITION_PRODUCE_VERSION
        refused = await self._ask_coordinator(transactional_id, verifying, add)
        if add and ErrorCode.CONCURRENT_TRANSACTIONS in refused.values():
            refused = await self._ask_while_concurrent(transactional_id, verifying, refused)
        now_ms = int(time.time() * 1000)  # appended once the coordinator answered
        failed = False
        for parked in verifying:
            answer, partition = parked.answer, parked.partition
            error = refused.get((partition.topic, partition.index))
            try:
                if error is not None:
                    code, message = produce_error(error, version)
                    raise KafkaError(code, message)
                if parked.refusal is not None:  # counted as failed when it was refused
                    _copy_refusal(parked.refusal, answer)
                    failed = True
                    continue
                result = partition.append(parked.batch, now_ms, parked.guard)
            except KafkaError as exc:
                failed = True
                if parked.refusal is None:  # a refused batch was counted when it was refused
                    self.metrics.produce_failed(partition.topic, parked.size)
                answer.error_code, answer.error_message = exc.code, exc.message
                continue
            self.metrics.produced(partition.topic, parked.batch.records_count, parked.batch.size)
            answer.base_offset, answer.log_append_time_ms = result.base_offset, result.log_append_time
            answer.log_start_offset = result.log_start_offset
            if acks == -1 and partition.has_followers:
                replicating.append((answer, partition, result.last_offset + 1))
        return failed

    async def _ask_while_concurrent(self, transactional_id: str, verifying: list[Verifying],
                                    refused: dict[TopicPartition, ErrorCode]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's maybeRetryOnConcurrentTransactions (transaction version 2): a coordinator still
        writing the markers of the producer's previous transaction answers CONCURRENT_TRANSACTIONS;
        the leader asks again every add.partitions.to.txn.retry.backoff.ms for up to
        add.partitions.to.txn.retry.backoff.max.ms (request.timeout.ms at most) before the producer
        is told, so the batches it pipelined behind this one are not refused out of order."""
        config = self.transactions.config
        budget_s = min(config.get_int("add.partitions.to.txn.retry.backoff.max.ms"),
                       config.get_int("request.timeout.ms")) / 1000
        backoff_s = config.get_int("add.partitions.to.txn.retry.backoff.ms") / 1000
        deadline = time.monotonic() + budget_s
        while ErrorCode.CONCURRENT_TRANSACTIONS in refused.values() and time.monotonic() + backoff_s <= deadline:
            await asyncio.sleep(backoff_s)  # Kafka's scheduled retry: the coordinator is busy for milliseconds
            refused = await self._ask_coordinator(transactional_id, verifying, True)
        return refused

    async def _ask_coordinator(self, transactional_id: str, verifying: list[Verifying],
                               add: bool) -> dict[TopicPartition, ErrorCode]:
        """The parked partitions the coordinator did not confirm (or add), with its error. A request's
        transactional batches come from one producer; a batch of another is refused as Kafka does."""
        first = verifying[0].batch
        pid, epoch = first.producer_id, first.producer_epoch
        strangers = {(v.partition.topic, v.partition.index): ErrorCode.INVALID_PRODUCER_ID_MAPPING
                     for v in verifying if (v.batch.producer_id, v.batch.producer_epoch) != (pid, epoch)}
        wanted = [(v.partition.topic, v.partition.index) for v in verifying
                  if (v.partition.topic, v.partition.index) not in strangers]
        txns = self.transactions
        coordinator = txns.txn_coordinator_node(transactional_id)
        verifier = txns.txn_verifier
        if coordinator is None or verifier is None:
            return {**dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE), **strangers}
        if coordinator == txns.node_id:  # leadership of its state partition came here meanwhile
            local = txns.txn_coordinator
            if add:
                found = dict.fromkeys(wanted, local.add_partitions(transactional_id, pid, epoch, wanted, TV2))
            else:
                found = local.verify_partitions(transactional_id, pid, epoch, wanted)
            return {**{tp: e for tp, e in found.items() if e != ErrorCode.NONE}, **strangers}
        refused = await verifier.verify(coordinator, transactional_id, pid, epoch, wanted, add=add)
        return {**refused, **strangers}

    async def await_replication(self, replicating: list[Replicating], timeout_ms: int) -> None:
        """acks=all: the delayed produce over the appended partitions, each answer then carrying its
        outcome (a partition that did not get there loses its offsets, except after
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka answers)."""
        outcomes = await delayed_produce([(partition, offset) for _, partition, offset in replicating], timeout_ms)
        for (answer, _, _), outcome in zip(replicating, outcomes, strict=True):
            if outcome != ErrorCode.NONE:
                answer.error_code = outcome
                answer.error_message = None
                if outcome != ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                    answer.base_offset = answer.log_append_time_ms = answer.log_start_offset = -1


def partition_error(exc: KafkaError, index: int,
                    record_errors: list[ProduceResponse.BatchIndexAndErrorMessage] | None = None) -> PartitionResponse:
    """A partition's produce answer refused with ``exc``."""
    return PartitionResponse(index=index, error_code=exc.code, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=record_errors or [], error_message=exc.message)


def _transactional_header(records: object) -> RecordBatch | None:
    """The header of the v2 batch ``records`` starts with when it is transactional (read as Kafka
    reads the first batch to route it, before validation), else None."""
    if not isinstance(records, bytes | bytearray | memoryview) or len(records) < BATCH_OVERHEAD:
        return None
    header = RecordBatch(records)
    # One batch, whole (Kafka refuses anything else from Produce v3 on before adding the partition).
    sane = header.magic == 2 and header.size == len(records)
    return header if sane and header.is_transactional else None


def _copy_refusal(refusal: PartitionResponse, answer: PartitionResponse) -> None:
    answer.error_code, answer.error_message = refusal.error_code, refusal.error_message
    answer.record_errors = refusal.record_errors


def _records_bytes(records: object) -> int:
    return len(records) if isinstance(records, bytes | bytearray | memoryview) else 0
