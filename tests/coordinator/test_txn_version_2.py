"""Transaction version 2 (KIP-890 part 2) in the coordinator: every end bumps the epoch and the
markers carry the bumped one; retries are recognised by the epoch one below; an exhausted epoch
moves the producer to a new id at completion; the state is logged in TransactionLogValue v1 and
reloads with its transaction version. EndTxn below v5 never bumps (the request decides)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from grete.coordinator.transactions.txn import TV2, EndResult, TransactionCoordinator
from grete.coordinator.transactions.txn_format import TxnState, decode_value
from grete.coordinator.transactions.txn_state import MAX_PRODUCER_EPOCH, TopicPartition, TxnConfig
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test

TP = ("t", 0)


class _Log:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def read(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return list(self.records)

    def coordinator_epoch(self, partition: int) -> int:
        return 0


class _Markers:
    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, int]] = []  # pid, epoch, commit, transaction version

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *, transaction_version: int = 0) -> None:
        if list(partitions):
            self.written.append((producer_id, producer_epoch, commit, transaction_version))


def _coordinator(log: _Log | None = None, markers: _Markers | None = None) -> TransactionCoordinator:
    ids = iter(range(1000, 2000))
    coordinator = TransactionCoordinator(TxnConfig(num_partitions=1), log or _Log(), markers or _Markers(),
                                         lambda: next(ids))
    coordinator.load()
    return coordinator


@async_test
async def test_every_end_bumps_the_epoch_and_the_markers_carry_it() -> None:
    markers = _Markers()
    c = _coordinator(markers=markers)
    init = c.init_producer_id("tx", 60000)
    pid, e = init.producer_id, init.producer_epoch
    assert c.add_partitions("tx", pid, e, [TP], TV2) is ErrorCode.NONE
    assert c.end_txn("tx", pid, e, True, TV2) == EndResult(ErrorCode.NONE, pid, e + 1)
    assert markers.written == [(pid, e + 1, True, TV2)]
    assert c.end_txn("tx", pid, e, True, TV2) == EndResult(ErrorCode.NONE, pid, e + 1)  # a retry
    assert c.end_txn("tx", pid, e, False, TV2).error is ErrorCode.INVALID_TXN_STATE
    assert c.end_txn("tx", pid, e + 1, True, TV2).error is ErrorCode.INVALID_TXN_STATE  # nothing added
    assert c.end_txn("tx", pid, e + 2, True, TV2).error is ErrorCode.PRODUCER_FENCED
    assert c.end_txn("tx", pid + 1, e + 1, True, TV2).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions("tx", pid, e, [TP], TV2) is ErrorCode.PRODUCER_FENCED  # the old epoch is done
    assert c.end_txn("tx", pid, e + 1, False, TV2) == EndResult(ErrorCode.NONE, pid, e + 2)  # an empty abort
    assert markers.written == [(pid, e + 1, True, TV2)]  # nothing to mark
    assert c.describe("tx").state is TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    c.shutdown()


@async_test
async def test_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    log = _Log()
    c = _coordinator(log)
    init = c.init_producer_id("tx", 60000)
    pid = init.producer_id
    meta = c.describe("tx")
    assert meta is not None
    last = MAX_PRODUCER_EPOCH - 1
    c.state_manager.install(meta.transit(TxnState.EMPTY, 0, producer_epoch=last))  # as after 32766 transactions
    assert c.add_partitions("tx", pid, last, [TP], TV2) is ErrorCode.NONE
    ended = c.end_txn("tx", pid, last, True, TV2)
    new_pid = ended.producer_id
    assert ended.error is ErrorCode.NONE and new_pid != pid and ended.producer_epoch == 0
    assert c.end_txn("tx", pid, last, True, TV2) == EndResult(ErrorCode.NONE, new_pid, 0)  # its retry
    assert c.add_partitions("tx", new_pid, 0, [TP], TV2) is ErrorCode.NONE
    done = decode_value(log.records[-1][1] or b"")
    assert (done.producer_id, done.client_transaction_version) == (new_pid, TV2)
    c.shutdown()


@async_test
async def test_version_1_requests_never_bump() -> None:
    markers = _Markers()
    c = _coordinator(markers=markers)
    init = c.init_producer_id("tx", 60000)
    pid, e = init.producer_id, init.producer_epoch
    # A leader added for it at Produce 12 (transaction version 2), but EndTxn v4 ends it: no bump.
    assert c.add_partitions("tx", pid, e, [TP], TV2) is ErrorCode.NONE
    assert c.end_txn("tx", pid, e, True).error is ErrorCode.NONE
    assert markers.written == [(pid, e, True, 0)]
    assert c.add_partitions("tx", pid, e, [TP]) is ErrorCode.NONE
    c.shutdown()


@async_test
async def test_the_state_reloads_with_its_transaction_version() -> None:
    log = _Log()
    c = _coordinator(log)
    init = c.init_producer_id("tx", 60000)
    assert c.add_partitions("tx", init.producer_id, init.producer_epoch, [TP], TV2) is ErrorCode.NONE
    c.shutdown()
    assert log.records[-1][1] is not None and log.records[-1][1][:2] == b"\x00\x01"  # value v1
    reloaded = _coordinator(log)
    meta = reloaded.describe("tx")
    assert meta is not None and meta.client_transaction_version == TV2 and meta.state is TxnState.ONGOING
    # A time-out abort of a transaction version 2 transaction fences, then bumps again for the end.
    reloaded._on_timeout("tx", meta.producer_id, meta.producer_epoch, meta.start_ms)
    assert reloaded.describe("tx").producer_epoch == init.producer_epoch + 2  # type: ignore[union-attr]
    await asyncio.sleep(0)
    reloaded.shutdown()


class _RemoteMarkers(_Markers):
    """Markers that other brokers still have to acknowledge: the end waits on this future."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: asyncio.Future[None] | None = None

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *, transaction_version: int = 0) -> asyncio.Future[None]:
        super().write_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions,
                              transaction_version=transaction_version)
        self.pending = asyncio.get_running_loop().create_future()
        return self.pending


@async_test
async def test_a_takeover_while_the_abort_s_markers_travel_is_asked_to_retry() -> None:
    """A new producer instance takes over a transactional id whose transaction is open: the
    coordinator aborts it (fencing the old epoch); while its markers are still on their way to other
    brokers the new instance gets CONCURRENT_TRANSACTIONS and retries, as Kafka's coordinator
    answers, and gets a bumped epoch once the abort is complete."""
    markers = _RemoteMarkers()
    c = _coordinator(markers=markers)
    init = c.init_producer_id("tx", 60000)
    pid, e = init.producer_id, init.producer_epoch
    assert c.add_partitions("tx", pid, e, [TP]) is ErrorCode.NONE
    assert c.init_producer_id("tx", 60000).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert c.describe("tx").state is TxnState.PREPARE_ABORT  # type: ignore[union-attr]
    assert c.init_producer_id("tx", 60000).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert markers.pending is not None
    markers.pending.set_result(None)
    await asyncio.sleep(0)  # the completion runs in the marker future's callback
    again = c.init_producer_id("tx", 60000)
    assert again.error is ErrorCode.NONE and again.producer_id == pid and again.producer_epoch > e + 1
    c.shutdown()


@async_test
async def test_the_next_end_while_the_commit_s_markers_travel_is_asked_to_retry() -> None:
    """An empty abort right after a commit, under the epoch the commit returned, while the commit's
    markers are still on their way to other brokers: CONCURRENT_TRANSACTIONS, then done once the
    commit completes (Kafka's coordinator since KAFKA-18464; it was fenced before, PRODUCER_FENCED)."""
    markers = _RemoteMarkers()
    c = _coordinator(markers=markers)
    init = c.init_producer_id("tx", 60000)
    pid, e = init.producer_id, init.producer_epoch
    assert c.add_partitions("tx", pid, e, [TP], TV2) is ErrorCode.NONE
    assert c.end_txn("tx", pid, e, True, TV2) == EndResult(ErrorCode.NONE, pid, e + 1)
    assert c.end_txn("tx", pid, e + 1, False, TV2).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert c.end_txn("tx", pid, e, True, TV2).error is ErrorCode.CONCURRENT_TRANSACTIONS  # its retry, too
    assert markers.pending is not None
    markers.pending.set_result(None)
    await asyncio.sleep(0)
    assert c.end_txn("tx", pid, e, True, TV2) == EndResult(ErrorCode.NONE, pid, e + 1)  # the retry, answered
    assert c.end_txn("tx", pid, e + 1, False, TV2) == EndResult(ErrorCode.NONE, pid, e + 2)
    c.shutdown()
