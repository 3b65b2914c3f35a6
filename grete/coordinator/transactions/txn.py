"""The transaction coordinator: transactional ids, producer epochs, two-phase commit with markers.

Kafka's design (KIP-98, transaction version 1): a producer registers its ``transactional.id``
(InitProducerId), which bumps the epoch and fences any older instance; it adds partitions
(AddPartitionsToTxn) and a group's offsets partition (AddOffsetsToTxn) before writing to them; EndTxn
moves the transaction to PrepareCommit/PrepareAbort (written to ``__transaction_state`` first, so a
crash resumes it), writes a COMMIT/ABORT marker to every partition, and completes.

On one node every partition is local, so markers are written synchronously and a transaction never
stays in a Prepare state between requests, except across a crash: ``load()`` finishes those. All
methods run on the broker's event loop and are synchronous, so each is atomic with respect to every
other request: that is how each transactional id has exactly one owner at a time.

Time-outs are timers per transaction (not a polling loop): an Ongoing transaction older than its
``transaction.timeout.ms`` is aborted with a bumped epoch, which fences the producer that opened it.

The partitions served here and their state table are txn_state_manager.py's (Kafka's
TransactionStateManager); ending a transaction (prepare, markers, complete) is txn_commit.py's.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from grete.coordinator.transactions.txn_commit import TV2, MarkerWriter, TxnCommit, epoch_exhausted
from grete.coordinator.transactions.txn_format import TxnState, encode_key
from grete.coordinator.transactions.txn_state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnConfig,
    TxnMetadata,
)
from grete.coordinator.transactions.txn_state_manager import NO_EPOCH, TxnStateManager, TxnStore
from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("grete.coordinator.transactions.txn")


@dataclass(frozen=True)
class EndResult:
    """EndTxn's answer; from v5 (transaction version 2) with the producer id and epoch to use next."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["TV2", "EndResult", "InitResult", "MarkerWriter", "TransactionCoordinator", "TxnStore"]


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, store: TxnStore, markers: MarkerWriter,
                 next_producer_id: Callable[[], int], *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.store = store
        self.next_producer_id = next_producer_id
        self.now_ms = now_ms
        self.state_manager = TxnStateManager(config, store)
        self.commit = TxnCommit(self.state_manager, markers, next_producer_id, now_ms, self._cancel_timeout)
        self.txns = self.state_manager.txns
        self.owned_partitions = self.state_manager.owned_partitions
        self._timeouts: dict[str, asyncio.TimerHandle] = {}
        self._expiry_timer: asyncio.TimerHandle | None = None
        self.active = False  # started and not shut down: the timers run

    # ================================================================== lifecycle

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.partition_for(transactional_id)

    def load(self) -> None:
        """Serve every __transaction_state partition (a single node leads them all), synchronously:
        nothing is answered before this returns."""
        self.startup()
        for partition in range(self.config.num_partitions):
            if partition not in self.owned_partitions and partition not in self.state_manager.loading_partitions:
                self._serve(partition, self.state_manager.read(partition))
        log.info("loaded %d transactional ids from __transaction_state", len(self.txns))

    def startup(self) -> None:
        if not self.active:
            self.active = True
            self._schedule_expiry()

    async def load_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        """Kafka's onElection: this broker leads ``partition`` of __transaction_state in leader epoch
        ``epoch``. Its ids answer COORDINATOR_LOAD_IN_PROGRESS while the log is replayed (a chunk at a
        time, so other requests are served meanwhile); then the commits and aborts the previous
        coordinator (or a crash) left half done are finished. A stale election changes nothing."""
        self.startup()
        found = await self.state_manager.load(partition, epoch)
        if found is not None:
            self._serve(partition, found)

    @property
    def loading_partitions(self) -> set[int]:
        return self.state_manager.loading_partitions

    def _serve(self, partition: int, found: dict[str, TxnMetadata]) -> None:
        for meta in self.state_manager.serve(partition, found):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("completing %s of %s interrupted by a restart", meta.state.kafka_name,
                         meta.transactional_id)
                try:
                    self.commit.write_markers_and_complete(meta)
                except KafkaError as exc:
                    # Stays prepared: clients get CONCURRENT_TRANSACTIONS until a new election retries.
                    log.warning("could not complete %s of %s: %s", meta.state.kafka_name,
                                meta.transactional_id, exc)
            elif meta.state is TxnState.ONGOING:
                self._schedule_timeout(meta)

    def unload_partition(self, partition: int, epoch: int = NO_EPOCH) -> None:
        """Kafka's onResignation: forget the partition's ids (their requests now answer
        NOT_COORDINATOR) and their timers; the new coordinator finishes what they had begun. A
        resignation older than the last election is ignored."""
        for meta in self.state_manager.resign(partition, epoch):
            self._cancel_timeout(meta.transactional_id)

    def shutdown(self) -> None:
        self.active = False
        self.state_manager.clear()
        for handle in self._timeouts.values():
            handle.cancel()
        self._timeouts.clear()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    # --- InitProducerId ---------------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int = NO_PRODUCER_ID,
                         expected_epoch: int = NO_PRODUCER_EPOCH) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        if (error := self.state_manager.coordinator_error(transactional_id)) is not None:
            return InitResult(error)
        meta = self.txns.get(transactional_id)
        try:
            if meta is None:
                meta = TxnMetadata(transactional_id, self.next_producer_id(), 0, timeout_ms, TxnState.EMPTY,
                                   self.now_ms())
                self.state_manager.persist(meta)
                return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            return self._reinit(meta, timeout_ms, expected_pid, expected_epoch)
        except KafkaError as exc:
            return InitResult(exc.code)

    def _reinit(self, meta: TxnMetadata, timeout_ms: int, expected_pid: int, expected_epoch: int) -> InitResult:
        if meta.in_flight:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_pid != NO_PRODUCER_ID:
            if not (meta.producer_epoch == NO_PRODUCER_EPOCH or expected_pid == meta.producer_id
                    or (expected_pid == meta.last_producer_id and epoch_exhausted(expected_epoch))):
                return InitResult(ErrorCode.PRODUCER_FENCED)
            if (expected_pid, expected_epoch) == (meta.last_producer_id, meta.last_producer_epoch) \
                    and meta.state is not TxnState.ONGOING:
                # A retry of a bump whose answer was lost: hand out the same id and epoch again.
                return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            if expected_epoch != meta.producer_epoch:
                return InitResult(ErrorCode.PRODUCER_FENCED)
        if meta.state is TxnState.ONGOING:
            # A new instance takes over: the old one's transaction is aborted with a bumped epoch,
            # so any write it still has in flight is rejected as fenced.
            meta = self.commit.abort(meta, fence=True)
            if meta.in_flight:
                # Its markers are still on their way to other brokers: the new instance retries
                # until the abort is complete, as Kafka's coordinator answers it.
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        pid, epoch = self._bumped(meta)
        renewed = meta.transit(TxnState.EMPTY, self.now_ms(), producer_id=pid, producer_epoch=epoch,
                               timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1,
                               last_producer_id=meta.producer_id, last_producer_epoch=meta.producer_epoch)
        self.state_manager.persist(renewed)
        return InitResult(ErrorCode.NONE, renewed.producer_id, renewed.producer_epoch)

    def _bumped(self, meta: TxnMetadata) -> tuple[int, int]:
        if epoch_exhausted(meta.producer_epoch):
            return self.next_producer_id(), 0
        return meta.producer_id, meta.producer_epoch + 1

    # --- AddPartitionsToTxn -----------------------------------------------------------------------
    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], client_transaction_version: int = 0) -> ErrorCode:
        """``client_transaction_version`` 2: a partition leader adding for a transaction version 2
        client (AddPartitionsToTxn v5), whose transaction then ends with an epoch bump."""
        meta, error = self._producer_txn(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        if meta.in_flight:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = frozenset(partitions)
        if (meta.state is TxnState.ONGOING and wanted <= meta.partitions
                and meta.client_transaction_version == client_transaction_version):
            return ErrorCode.NONE
        starting = meta.state is not TxnState.ONGOING
        now = self.now_ms()
        updated = meta.transit(TxnState.ONGOING, now, partitions=meta.partitions | wanted,
                               start_ms=now if starting else meta.start_ms,
                               client_transaction_version=client_transaction_version)
        try:
            self.state_manager.persist(updated)
        except KafkaError as exc:
            return exc.code
        if starting:
            self._schedule_timeout(updated)
        return ErrorCode.NONE

    def _producer_txn(self, transactional_id: str, producer_id: int,
                      producer_epoch: int) -> tuple[TxnMetadata | None, ErrorCode]:
        """The transaction of this producer, or the error Kafka answers for a stranger or a zombie."""
        if not transactional_id:
            return None, ErrorCode.INVALID_REQUEST
        if (error := self.state_manager.coordinator_error(transactional_id)) is not None:
            return None, error
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return meta, ErrorCode.NONE

    # --- EndTxn -----------------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                client_transaction_version: int = 0) -> EndResult:
        if client_transaction_version >= TV2:
            return self._end_txn_v2(transactional_id, producer_id, producer_epoch, commit)
        meta, error = self._producer_txn(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return EndResult(error)
        state = meta.state
        if state is TxnState.ONGOING:
            try:
                # The request's version decides, as in Kafka: a client ending with EndTxn < 5 does
                # not expect a bump, even if a leader added for it at Produce 12+.
                self.commit.end(meta, commit, client_transaction_version=0)
            except KafkaError as exc:
                return EndResult(exc.code)
            return EndResult(ErrorCode.NONE)
        if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return EndResult(ErrorCode.NONE)  # a retry of an EndTxn that already finished
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state is TxnState.PREPARE_EPOCH_FENCE:
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        return EndResult(ErrorCode.INVALID_TXN_STATE)

    def _end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> EndResult:
        """Transaction version 2 (Kafka's endTransaction for clients that bump the epoch at every
        end): the answer names the producer id and epoch the client uses next. A retry is known by
        its epoch, one below the coordinator's (or the last one before an overflow to a new id);
        the same epoch as the coordinator's is the next transaction's end, so after a completed
        transaction an abort with it is a new (empty) transaction's abort."""
        if not transactional_id:
            return EndResult(ErrorCode.INVALID_REQUEST)
        if (error := self.state_manager.coordinator_error(transactional_id)) is not None:
            return EndResult(error)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # The previous end's markers are still on their way (leaders on other brokers): whatever
            # this is (its retry, or the next transaction's end under the epoch that end returned), it
            # is asked to retry before any epoch check. Kafka's pendingTransitionInProgress check, moved
            # first by KAFKA-18464: an empty abort right after a commit was fenced otherwise.
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == MAX_PRODUCER_EPOCH - 1
                             and meta.producer_epoch == 0)
        retry_on_bump = meta.producer_epoch == producer_epoch + 1
        retry = retry_on_bump or retry_on_overflow
        state = meta.state
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry or producer_epoch == meta.producer_epoch
        else:
            valid_epoch = producer_epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return EndResult(ErrorCode.PRODUCER_FENCED)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is done and retry:
            return EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        if state is TxnState.ONGOING or (not commit and not retry and state in (
                TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)):
            try:
                ended = self.commit.end(meta, commit, client_transaction_version=TV2)
            except KafkaError as exc:
                return EndResult(exc.code)
            return EndResult(ErrorCode.NONE, *self._next_producer(ended))
        return EndResult(ErrorCode.INVALID_TXN_STATE)

    @staticmethod
    def _next_producer(ended: TxnMetadata) -> tuple[int, int]:
        """The producer id and epoch a client continues with once ``ended`` completes: the bumped
        epoch, or epoch 0 of the next producer id when the epoch overflowed."""
        if ended.next_producer_id != NO_PRODUCER_ID:
            return ended.next_producer_id, 0
        return ended.producer_id, ended.producer_epoch

    # --- checks for other APIs --------------------------------------------------------------------
    def verify_partition(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 1 for Produce and TxnOffsetCommit: a transactional write is accepted only for
        a partition its producer added to its Ongoing transaction; this is what stops a late write
        after an abort from opening a transaction nobody will ever end (a hanging transaction)."""
        if not self.config.verify_partitions:
            return ErrorCode.NONE
        txn_id = self.state_manager.by_pid.get(producer_id)
        meta = self.txns.get(txn_id) if txn_id is not None else None
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4's verify-only mode, asked by a partition leader before it takes a
        producer's first transactional batch (Kafka's handleVerifyPartitionsInTransaction): each
        partition NONE if the Ongoing transaction holds it, TRANSACTION_ABORTABLE if not; one error
        for all of them when the producer is a stranger, a zombie, or its transaction is ending.
        A Prepare state is not awaited here: the leader's verification guard catches a marker that
        lands between this answer and its append."""
        wanted = list(partitions)
        meta, error = self._producer_txn(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return dict.fromkeys(wanted, error)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return dict.fromkeys(wanted, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in wanted}

    # --- admin ------------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1,
             pattern: str | None = None) -> tuple[list[TxnMetadata], list[str]]:
        """ListTransactions: the matching transactions and the state filters Kafka does not know."""
        wanted_states, unknown = set(), []
        for name in states:
            state = TxnState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        pids = set(producer_ids)
        regex = re.compile(pattern) if pattern else None
        now = self.now_ms()
        found = [m for m in self.txns.values()
                 if (not wanted_states or m.state in wanted_states) and (not pids or m.producer_id in pids)
                 and (min_duration_ms < 0 or (m.state is TxnState.ONGOING and now - m.start_ms > min_duration_ms))
                 and (regex is None or regex.fullmatch(m.transactional_id) is not None)]
        return found, unknown

    # --- timers -----------------------------------------------------------------------------------
    def _schedule_timeout(self, meta: TxnMetadata) -> None:
        self._cancel_timeout(meta.transactional_id)
        delay = max(meta.start_ms + meta.timeout_ms - self.now_ms(), 0) / 1000
        self._timeouts[meta.transactional_id] = asyncio.get_running_loop().call_later(
            delay, self._on_timeout, meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.start_ms)

    def _cancel_timeout(self, transactional_id: str) -> None:
        handle = self._timeouts.pop(transactional_id, None)
        if handle is not None:
            handle.cancel()

    def _on_timeout(self, transactional_id: str, producer_id: int, producer_epoch: int, start_ms: int) -> None:
        self._timeouts.pop(transactional_id, None)
        meta = self.txns.get(transactional_id)
        if (not self.active or meta is None or meta.state is not TxnState.ONGOING
                or (meta.producer_id, meta.producer_epoch, meta.start_ms) != (producer_id, producer_epoch, start_ms)):
            return
        log.info("aborting transaction of %s (producer %d): older than transaction.timeout.ms=%d",
                 transactional_id, producer_id, meta.timeout_ms)
        try:
            self.commit.abort(meta, fence=True)
        except KafkaError as exc:
            log.warning("could not abort timed-out transaction %s: %s", transactional_id, exc)
            self._schedule_timeout(meta)

    def _schedule_expiry(self) -> None:
        self._expiry_timer = asyncio.get_running_loop().call_later(
            self.config.remove_expired_interval_ms / 1000, self._on_expiry)

    def _on_expiry(self) -> None:
        if not self.active:
            return
        self.expire_transactional_ids()
        self._schedule_expiry()

    def expire_transactional_ids(self) -> int:
        """transactional.id.expiration.ms: ids idle that long (and not mid-transaction) are forgotten."""
        now = self.now_ms()
        idle = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        expired = [m for m in self.txns.values()
                   if m.state in idle and now - m.last_update_ms >= self.config.id_expiration_ms]
        for meta in expired:
            try:
                self.store.append(self.partition_for(meta.transactional_id), encode_key(meta.transactional_id), None)
            except KafkaError as exc:
                log.warning("could not expire transactional id %s: %s", meta.transactional_id, exc)
                continue
            self._cancel_timeout(meta.transactional_id)
            self.state_manager.forget(meta)
        return len(expired)
