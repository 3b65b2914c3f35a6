"""KIP-890 part 1 verification guards (Kafka's VerificationStateEntry): while a partition leader waits
for the transaction coordinator (on another broker) to confirm a producer's transaction, that
producer's first transactional batch may be appended only under the guard handed out for the wait;
a marker or a newer epoch makes the guard stale. While it waits, the lowest sequence the producer
sent under it bounds what may be appended first (Kafka's lowestSequence): a later batch of the
producer cannot be written before the one that asked, even when that one's answer failed and the
producer sends it again."""

from __future__ import annotations

from dataclasses import dataclass

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.storage.log import Log


class VerificationGuard:
    """An identity: a batch verified under a guard may be appended only while it is still the
    partition's guard for its producer."""

    __slots__ = ()


@dataclass(slots=True)
class _Waiting:
    epoch: int
    guard: VerificationGuard
    created_ms: int
    lowest_sequence: int
    epoch_bump: bool  # transaction version 2: the producer's batches add their own partitions


class VerificationGuards:
    """One partition's guards: producer id -> what its verification waits with."""

    __slots__ = ("by_producer",)

    def __init__(self) -> None:
        self.by_producer: dict[int, _Waiting] = {}

    def start(self, producer_id: int, producer_epoch: int, now_ms: int, expiration_ms: int,
              base_sequence: int = 0, epoch_bump: bool = False) -> VerificationGuard:
        """The guard the producer's first batch must be appended under. A guard of the same or a newer
        epoch is shared (the same epoch's keeps the lowest sequence asked under it); an older one is
        replaced."""
        found = self.by_producer.get(producer_id)
        if found is None or found.epoch < producer_epoch:
            self._expire(now_ms, expiration_ms)
            found = self.by_producer[producer_id] = _Waiting(producer_epoch, VerificationGuard(), now_ms,
                                                             base_sequence, epoch_bump)
        elif found.epoch == producer_epoch:
            found.lowest_sequence = min(found.lowest_sequence, base_sequence)
        return found.guard

    def check(self, producer_id: int, guard: VerificationGuard) -> None:
        found = self.by_producer.get(producer_id)
        if found is None or found.guard is not guard:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "Record was not part of an ongoing transaction")

    def check_sequence(self, batch: RecordBatch, log: Log, partition: str) -> None:
        """Kafka's ProducerAppendInfo.checkSequence while a verification waits: a transaction version
        2 producer with no state here starts at sequence 0, and nothing above the lowest sequence
        asked under the guard goes first."""
        found = self.by_producer.get(batch.producer_id)
        first = batch.base_sequence
        if found is None or first < 0:
            return
        state = log.producer(batch.producer_id)
        where = (f"for producer {batch.producer_id} at offset {log.log_end_offset} in partition {partition}: "
                 f"{first} (incoming seq. number)")
        if found.epoch_bump and first != 0 and (state is None or not state.batches):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, f"Invalid sequence number {where}. Expected "
                             "sequence 0 for transactions v2 idempotent producer with no existing state.")
        if first > found.lowest_sequence:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"Out of order sequence number {where}, {found.lowest_sequence} (earliest seen sequence)")

    def clear(self, batch: RecordBatch, transaction_version: int) -> None:
        """A transaction's first batch or its marker: either it is ongoing now or it is over, and in
        both cases an earlier verification no longer speaks for it (Kafka clears it). Except a
        transaction version 2 marker with the guard's epoch: that guard is the next transaction's,
        begun under the epoch this marker's bump handed out."""
        found = self.by_producer.get(batch.producer_id)
        if found is None:
            return
        if transaction_version >= 2 and batch.is_control and found.epoch == batch.producer_epoch:
            return
        del self.by_producer[batch.producer_id]

    def clear_all(self) -> None:
        self.by_producer.clear()

    def _expire(self, now_ms: int, limit: int) -> None:
        """Guards of producers that never came back (their verification failed) go after
        producer.id.expiration.ms, as Kafka expires its verification entries."""
        for pid in [p for p, w in self.by_producer.items() if now_ms - w.created_ms >= limit]:
            del self.by_producer[pid]
