"""The partition side of KIP-890: verification guards (a producer's first transactional batch is
appended only while the guard it was verified under stands; markers and transactional batches end
a guard) and transaction version 2 markers (a bumped epoch, strictly above the producer's)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from grete.broker.replica.partition import Partition
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log

PID = 7


def leader(tmp_path: Path) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_id=uuid.uuid4(), clean_shutdown=True)
    return Partition("t", 0, uuid.uuid4(), log, 0)


def data(epoch: int, seq: int = 0) -> RecordBatch:
    return RecordBatch(build_batch([Record(0, 0, None, b"v")], producer_id=PID, producer_epoch=epoch,
                                   base_sequence=seq, transactional=True))


def marker(epoch: int, commit: bool = False) -> RecordBatch:
    return RecordBatch(build_end_txn_marker(PID, epoch, commit, 0, 1000))


def test_a_batch_is_appended_under_the_guard_it_was_verified_with(tmp_path: Path) -> None:
    p = leader(tmp_path)
    guard = p.start_verification(PID, 0, 1000)
    assert guard is not None and p.start_verification(PID, 0, 1000) is guard  # shared while it waits
    p.append(data(0), 1000, guard)
    assert p.has_ongoing_transaction(PID, 0)
    assert p.start_verification(PID, 0, 1000) is None  # ongoing here: nothing to ask


def test_a_marker_landing_during_verification_refuses_the_batch(tmp_path: Path) -> None:
    """The hanging transaction KIP-890 prevents: the coordinator confirmed the partition, then the
    transaction was aborted and its marker written before the late batch arrived."""
    p = leader(tmp_path)
    p.append(data(0), 1000)
    p.append(marker(0), 1000)
    guard = p.start_verification(PID, 0, 1000)
    assert guard is not None
    p.append(marker(0), 1000)  # a second abort marker, as a retried WriteTxnMarkers writes one
    with pytest.raises(KafkaError) as refused:
        p.append(data(0, 1), 1000, guard)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    assert not p.has_ongoing_transaction(PID, 0)


def test_a_newer_epoch_replaces_the_guard(tmp_path: Path) -> None:
    p = leader(tmp_path)
    old = p.start_verification(PID, 0, 1000)
    new = p.start_verification(PID, 1, 1000)
    assert new is not None and new is not old
    with pytest.raises(KafkaError):
        p.append(data(0), 1000, old)
    p.append(data(1), 1000, new)


def test_transaction_version_2_markers_need_a_bumped_epoch(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append(data(3), 1000)
    with pytest.raises(KafkaError) as stale:
        p.append(marker(3, commit=True), 1000, transaction_version=2)
    assert stale.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    p.append(marker(3, commit=True), 1000)  # transaction version 1: the same epoch is the norm
    p.append(data(4), 1000)
    p.append(marker(5, commit=True), 1000, transaction_version=2)
    assert not p.has_ongoing_transaction(PID, 5)


def test_a_transaction_version_2_marker_keeps_the_next_transactions_guard(tmp_path: Path) -> None:
    """The client learns the bumped epoch from EndTxn and may begin its next transaction before the
    marker carrying that epoch reaches this leader: that marker ends the old guards only."""
    p = leader(tmp_path)
    p.append(data(0), 1000)
    next_guard = p.start_verification(PID, 1, 1000)
    p.append(marker(1, commit=True), 1000, transaction_version=2)
    p.append(data(1), 1000, next_guard)
    assert p.has_ongoing_transaction(PID, 1)


def test_nothing_above_the_lowest_sequence_asked_under_a_guard_goes_first(tmp_path: Path) -> None:
    """Kafka's lowestSequence: the producer's first batch (sequence 0) was refused or is still being
    verified; its next batch (sequence 1), verified meanwhile, must not be written before it — else
    the retried first batch is out of order for ever."""
    p = leader(tmp_path)
    first = p.start_verification(PID, 0, 1000, base_sequence=0)
    assert first is not None and p.start_verification(PID, 0, 1000, base_sequence=1) is first
    with pytest.raises(KafkaError) as refused:
        p.append(data(0, 1), 1000, first)
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "1 (incoming seq. number), 0 (earliest seen sequence)" in str(refused.value.message)
    p.append(data(0, 0), 1000, first)
    p.append(data(0, 1), 1000)  # the transaction is ongoing here now: in sequence after 0
    assert p.log_end_offset == 2


def test_a_transaction_version_2_producer_new_here_starts_at_sequence_0(tmp_path: Path) -> None:
    p = leader(tmp_path)
    guard = p.start_verification(PID, 0, 1000, base_sequence=5, epoch_bump=True)
    assert guard is not None
    with pytest.raises(KafkaError) as refused:
        p.append(data(0, 5), 1000, guard)
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "Expected sequence 0 for transactions v2" in str(refused.value.message)
    assert p.log_end_offset == 0
