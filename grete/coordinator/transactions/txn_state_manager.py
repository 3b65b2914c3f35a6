"""Which ``__transaction_state`` partitions the transaction coordinator serves, and the state table of
their transactional ids (Kafka's TransactionStateManager): onElection replays a partition's log, a
chunk at a time, into its ids; onResignation forgets them. Every state change is written to the log
before it is installed in memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from grete.coordinator.groups.offsets_format import partition_for
from grete.coordinator.transactions.txn_format import (
    FormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from grete.coordinator.transactions.txn_state import TxnConfig, TxnMetadata
from grete.protocol.errors import ErrorCode

log = logging.getLogger("grete.coordinator.transactions.txn")

NO_EPOCH = -1
# Records replayed between two yields to the event loop while a partition loads.
LOAD_CHUNK = 1000


class TxnStore(Protocol):
    """``__transaction_state`` as the coordinator sees it (the broker implements it over its log)."""

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Write one record durably; raise KafkaError on failure."""
        ...

    def read(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        ...

    def coordinator_epoch(self, partition: int) -> int:
        """The leader epoch of the state partition: stamped into markers to fence old coordinators."""
        ...


class TxnStateManager:
    def __init__(self, config: TxnConfig, store: TxnStore) -> None:
        self.config = config
        self.store = store
        self.txns: dict[str, TxnMetadata] = {}
        self.by_pid: dict[int, str] = {}
        # The __transaction_state partitions served here, those being loaded (a resignation replaces
        # the token and so abandons the load), and the leader epoch each was elected in.
        self.owned_partitions: set[int] = set()
        self._loads: dict[int, object] = {}
        self._epochs: dict[int, int] = {}

    def read(self, partition: int) -> dict[str, TxnMetadata]:
        """A partition's ids, read at once (a single node's start-up)."""
        return self._replay(self.store.read(partition))

    async def load(self, partition: int, epoch: int = NO_EPOCH) -> dict[str, TxnMetadata] | None:
        """Kafka's onElection: the ids of ``partition`` replayed from its log; None when the election
        is stale, the partition already served or loading, or a resignation abandoned the load."""
        if epoch != NO_EPOCH and epoch < self._epochs.get(partition, NO_EPOCH):
            log.info("ignoring election for __transaction_state-%d in stale epoch %d", partition, epoch)
            return None
        self._epochs[partition] = epoch
        if partition in self.owned_partitions or partition in self._loads:
            return None
        load = self._loads[partition] = object()
        try:
            found: dict[str, TxnMetadata] = {}
            for n, record in enumerate(self.store.read(partition), 1):
                self._replay_one(found, record)
                if n % LOAD_CHUNK == 0:
                    await asyncio.sleep(0)
                    if self._loads.get(partition) is not load:
                        return None  # resigned meanwhile
            await asyncio.sleep(0)  # other requests see LOAD_IN_PROGRESS meanwhile
            if self._loads.get(partition) is not load:
                return None
        finally:
            if self._loads.get(partition) is load:
                del self._loads[partition]
        return found

    @property
    def loading_partitions(self) -> set[int]:
        return set(self._loads)

    def serve(self, partition: int, found: dict[str, TxnMetadata]) -> list[TxnMetadata]:
        """Install a loaded partition's ids and serve it; the ids."""
        loaded = list(found.values())
        for meta in loaded:
            self.install(meta)
        self.owned_partitions.add(partition)
        return loaded

    def resign(self, partition: int, epoch: int = NO_EPOCH) -> list[TxnMetadata]:
        """Kafka's onResignation: the partition's ids are forgotten (and returned); nothing happens
        for a resignation older than the last election."""
        current = self._epochs.get(partition, NO_EPOCH)
        if epoch != NO_EPOCH and current != NO_EPOCH and epoch < current:
            log.info("ignoring resignation of __transaction_state-%d in stale epoch %d", partition, epoch)
            return []
        self._loads.pop(partition, None)
        self._epochs.pop(partition, None)
        self.owned_partitions.discard(partition)
        gone = [m for t, m in self.txns.items() if self.partition_for(t) == partition]
        for meta in gone:
            self.forget(meta)
        return gone

    def clear(self) -> None:
        self.owned_partitions.clear()
        self._loads.clear()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """Kafka's TransactionStateManager.getTransactionState: COORDINATOR_LOAD_IN_PROGRESS while the
        id's partition loads, NOT_COORDINATOR unless it is served here."""
        partition = self.partition_for(transactional_id)
        if partition in self._loads:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return ErrorCode.NOT_COORDINATOR
        return None

    def coordinator_epoch(self, partition: int) -> int:
        """The epoch stamped into markers, which fences markers of an older coordinator: the one this
        partition was elected in, else the store's."""
        epoch = self._epochs.get(partition, NO_EPOCH)
        return epoch if epoch != NO_EPOCH else self.store.coordinator_epoch(partition)

    @classmethod
    def _replay(cls, records: Iterable[tuple[bytes, bytes | None]]) -> dict[str, TxnMetadata]:
        found: dict[str, TxnMetadata] = {}
        for record in records:
            cls._replay_one(found, record)
        return found

    @staticmethod
    def _replay_one(found: dict[str, TxnMetadata], record: tuple[bytes, bytes | None]) -> None:
        key, value = record
        try:
            txn_id = decode_key(key)
            if value is None:
                found.pop(txn_id, None)
            else:
                found[txn_id] = TxnMetadata.from_log(txn_id, decode_value(value))
        except FormatError as exc:
            log.error("skipping unreadable __transaction_state record: %s", exc)

    def persist(self, meta: TxnMetadata) -> None:
        """Write the new state first; install it in memory only once it is in the log."""
        self.store.append(self.partition_for(meta.transactional_id), encode_key(meta.transactional_id),
                          encode_value(meta.to_log()))
        self.install(meta)

    def install(self, meta: TxnMetadata) -> None:
        old = self.txns.get(meta.transactional_id)
        if old is not None and old.producer_id != meta.producer_id:
            self.by_pid.pop(old.producer_id, None)
        self.txns[meta.transactional_id] = meta
        self.by_pid[meta.producer_id] = meta.transactional_id

    def forget(self, meta: TxnMetadata) -> None:
        self.txns.pop(meta.transactional_id, None)
        if self.by_pid.get(meta.producer_id) == meta.transactional_id:
            del self.by_pid[meta.producer_id]
