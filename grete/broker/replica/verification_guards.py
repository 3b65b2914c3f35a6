"""KIP-890 part 1 verification guards (Kafka's VerificationStateEntry): while a partition leader waits
for the transaction coordinator (on another broker) to confirm a producer's transaction, that
producer's first transactional batch may be appended only under the guard handed out for the wait;
a marker or a newer epoch makes the guard stale."""

from __future__ import annotations

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch


class VerificationGuard:
    """An identity: a batch verified under a guard may be appended only while it is still the
    partition's guard for its producer."""

    __slots__ = ()


class VerificationGuards:
    """One partition's guards: producer id -> (epoch, guard, created ms)."""

    __slots__ = ("by_producer",)

    def __init__(self) -> None:
        self.by_producer: dict[int, tuple[int, VerificationGuard, int]] = {}

    def start(self, producer_id: int, producer_epoch: int, now_ms: int, expiration_ms: int) -> VerificationGuard:
        """The guard the producer's first batch must be appended under. A guard of the same or a newer
        epoch is shared; an older one is replaced."""
        found = self.by_producer.get(producer_id)
        if found is None or found[0] < producer_epoch:
            self._expire(now_ms, expiration_ms)
            found = self.by_producer[producer_id] = (producer_epoch, VerificationGuard(), now_ms)
        return found[1]

    def check(self, producer_id: int, guard: VerificationGuard) -> None:
        found = self.by_producer.get(producer_id)
        if found is None or found[1] is not guard:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "Record was not part of an ongoing transaction")

    def clear(self, batch: RecordBatch, transaction_version: int) -> None:
        """A transaction's first batch or its marker: either it is ongoing now or it is over, and in
        both cases an earlier verification no longer speaks for it (Kafka clears it). Except a
        transaction version 2 marker with the guard's epoch: that guard is the next transaction's,
        begun under the epoch this marker's bump handed out."""
        found = self.by_producer.get(batch.producer_id)
        if found is None:
            return
        if transaction_version >= 2 and batch.is_control and found[0] == batch.producer_epoch:
            return
        del self.by_producer[batch.producer_id]

    def clear_all(self) -> None:
        self.by_producer.clear()

    def _expire(self, now_ms: int, limit: int) -> None:
        """Guards of producers that never came back (their verification failed) go after
        producer.id.expiration.ms, as Kafka expires its verification entries."""
        for pid in [p for p, (_, _, created) in self.by_producer.items() if now_ms - created >= limit]:
            del self.by_producer[pid]
