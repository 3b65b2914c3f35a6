"""Ending a transaction (two-phase commit): PrepareCommit or PrepareAbort is written to
``__transaction_state`` first (so a crash resumes it), then a COMMIT/ABORT marker goes to every
partition of the transaction, then the Complete state. Transaction version 2 bumps the producer
epoch as it ends (KIP-890 part 2)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from grete.coordinator.transactions.txn_format import TxnState
from grete.coordinator.transactions.txn_state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
)
from grete.coordinator.transactions.txn_state_manager import TxnStateManager
from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("grete.coordinator.transactions.txn")

TV2 = 2  # transaction version 2 (KIP-890 part 2): an epoch bump at every end of a transaction


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


# A marker refused because the producer or the coordinator moved on to a newer epoch (a coordinator
# that took over sends the markers again): its writer gives the partition up, as Kafka's
# TransactionMarkerRequestCompletionHandler does; an answer, not a failure.
FENCED_MARKER = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


class MarkerWriter(Protocol):
    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *,
                      transaction_version: int = 0) -> asyncio.Future[None] | None:
        """Write the markers; None when all are written now, else a future done once every leader
        has them (in a cluster, those led elsewhere go out as WriteTxnMarkers).
        ``transaction_version`` 2: the marker carries a bumped epoch (KIP-890 part 2, KIP-1228)."""
        ...


class TxnCommit:
    def __init__(self, state_manager: TxnStateManager, markers: MarkerWriter, next_producer_id: Callable[[], int],
                 now_ms: Callable[[], int], cancel_timeout: Callable[[str], None]) -> None:
        self.state_manager = state_manager
        self.txns = state_manager.txns
        self.markers = markers
        self.next_producer_id = next_producer_id
        self.now_ms = now_ms
        self._cancel_timeout = cancel_timeout

    def end(self, meta: TxnMetadata, commit: bool, *, client_transaction_version: int | None = None) -> TxnMetadata:
        """PrepareCommit/PrepareAbort, then the markers. Transaction version 2 bumps the epoch here
        (the markers carry the new one, which fences every write of the ended transaction), and
        moves to a fresh producer id at completion when the epoch is exhausted."""
        version = meta.client_transaction_version if client_transaction_version is None else client_transaction_version
        now = self.now_ms()
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if version < TV2:
            prepared = meta.transit(state, now, client_transaction_version=version)
        else:
            # An abort with nothing added (from Empty or Complete*) has no start of its own.
            empty = meta.state not in (TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE)
            epoch = meta.producer_epoch
            next_pid = self.next_producer_id() if epoch_exhausted(epoch) else NO_PRODUCER_ID
            prepared = meta.transit(state, now, producer_epoch=min(epoch + 1, MAX_PRODUCER_EPOCH),
                                    last_producer_epoch=epoch, next_producer_id=next_pid,
                                    client_transaction_version=version, start_ms=now if empty else meta.start_ms)
        self.state_manager.persist(prepared)
        return self.write_markers_and_complete(prepared)

    def abort(self, meta: TxnMetadata, *, fence: bool) -> TxnMetadata:
        """Abort an Ongoing transaction; ``fence`` bumps the epoch first (time-outs, takeovers)."""
        if fence and meta.producer_epoch < MAX_PRODUCER_EPOCH:
            fenced = meta.transit(TxnState.PREPARE_EPOCH_FENCE, self.now_ms(),
                                  producer_epoch=meta.producer_epoch + 1)
            meta = fenced  # not persisted on its own: Kafka logs it as the PrepareAbort below
        return self.end(meta, commit=False)

    def write_markers_and_complete(self, prepared: TxnMetadata) -> TxnMetadata:
        """Write the markers, then the Complete state. With markers still on their way to other
        brokers the transaction stays prepared (its producer gets CONCURRENT_TRANSACTIONS meanwhile,
        as Kafka's does) and completes when the last leader has answered."""
        commit = prepared.state is TxnState.PREPARE_COMMIT
        partition = self.state_manager.partition_for(prepared.transactional_id)
        pending = self.markers.write_markers(prepared.producer_id, prepared.producer_epoch, commit,
                                             self.state_manager.coordinator_epoch(partition), prepared.partitions,
                                             transaction_version=prepared.client_transaction_version)
        if pending is not None:
            pending.add_done_callback(lambda _: self._complete_later(prepared))
            return prepared
        return self._complete(prepared)

    def _complete(self, prepared: TxnMetadata) -> TxnMetadata:
        commit = prepared.state is TxnState.PREPARE_COMMIT
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if prepared.bumps_epoch and prepared.next_producer_id != NO_PRODUCER_ID:
            # The epoch overflowed: the next transaction runs under the new producer id.
            done = prepared.transit(state, self.now_ms(), partitions=frozenset(),
                                    producer_id=prepared.next_producer_id, producer_epoch=0,
                                    previous_producer_id=prepared.producer_id, next_producer_id=NO_PRODUCER_ID,
                                    last_producer_epoch=MAX_PRODUCER_EPOCH - 1)
        else:
            done = prepared.transit(state, self.now_ms(), partitions=frozenset())
        self.state_manager.persist(done)
        self._cancel_timeout(done.transactional_id)
        return done

    def _complete_later(self, prepared: TxnMetadata) -> None:
        current = self.txns.get(prepared.transactional_id)
        if current is None or current.state is not prepared.state or current.producer_epoch != prepared.producer_epoch:
            return  # resigned or fenced meanwhile: the next coordinator completes it
        try:
            self._complete(current)
        except KafkaError as exc:
            log.warning("could not complete %s of %s: %s", current.state.kafka_name, current.transactional_id, exc)
