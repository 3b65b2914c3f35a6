"""What the transaction coordinator keeps per transactional id, and its settings.

One ``TxnMetadata`` per transactional id, owned by the ``TransactionCoordinator``. Changes are made
on a copy, written to ``__transaction_state``, and only then installed, so memory never holds a
state a restart would lose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

from grete.coordinator.transactions.txn_format import TxnLogValue, TxnState

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka moves to a fresh producer id before the int16 epoch would overflow.
MAX_PRODUCER_EPOCH = 32767

# Which state may follow which (Kafka's TransactionState.validPreviousStates, inverted).
# Transaction version 2 lets an abort start from Empty and Complete* (an abort with nothing added).
VALID_NEXT: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE,
                               TxnState.PREPARE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                                 TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD,
                                         TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD,
                                        TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset(),
}


@dataclass(frozen=True)
class TxnConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_check_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    verify_partitions: bool = True  # transaction.partition.verification.enable


class TxnChanges(TypedDict, total=False):
    """The fields of ``TxnMetadata`` a state transition may change besides the state and its time."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: frozenset[TopicPartition]
    last_producer_id: int
    last_producer_epoch: int
    client_transaction_version: int
    previous_producer_id: int
    next_producer_id: int


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_update_ms: int
    start_ms: int = -1
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    # The id/epoch handed out before the last bump, so a retried InitProducerId (KIP-360) is
    # recognised instead of fencing the producer that asked.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # Transaction version 2 (KIP-890 part 2): the version of the client that last added to or ended
    # the transaction (2: the epoch is bumped at every end), the producer id before the last epoch
    # overflow, and the one the current transaction hands over to at its end when the epoch overflows.
    client_transaction_version: int = 0
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID

    def to_log(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms,
                           self.previous_producer_id, self.next_producer_id, self.client_transaction_version)

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state,
                   value.last_update_ms, value.start_ms, frozenset(value.partitions),
                   client_transaction_version=value.client_transaction_version,
                   previous_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id)

    @property
    def bumps_epoch(self) -> bool:
        """Transaction version 2: every end of a transaction bumps the producer epoch."""
        return self.client_transaction_version >= 2

    def transit(self, state: TxnState, now_ms: int, **changes: Unpack[TxnChanges]) -> TxnMetadata:
        """A copy in ``state``; raises if Kafka's state machine does not allow the move."""
        if state not in VALID_NEXT[self.state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)

    @property
    def in_flight(self) -> bool:
        """Prepare* states: markers are being written; clients must retry (CONCURRENT_TRANSACTIONS)."""
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)


class IllegalTransition(Exception):
    """A state change Kafka's coordinator would refuse: a bug here, never a client error."""
