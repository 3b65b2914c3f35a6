"""Idempotence (section 13) and transactions on the log (section 14)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage import Log, LogConfig
from grete.storage.producer_state import read_snapshot

from ._batches import append, marker, records

PID = 4242


def open_log(tmp_path: Path, **cfg: object) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig().replace(**cfg), clean_shutdown=True)


def produce(log: Log, seq: int, n: int = 2, *, epoch: int = 0, pid: int = PID, txn: bool = False):  # type: ignore[no-untyped-def]
    return append(log, [f"{seq}-{i}".encode() for i in range(n)], producer_id=pid, epoch=epoch, seq=seq,
                  transactional=txn)


def code_of(fn) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaError) as exc:
        fn()
    return exc.value.code


def test_duplicates_of_the_last_five_batches_return_the_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = [produce(log, seq) for seq in range(0, 14, 2)]  # 7 batches, seqs 0..13
    end = log.log_end_offset
    for original, seq in zip(first[2:], range(4, 14, 2), strict=True):
        dup = produce(log, seq)
        assert dup.duplicate and (dup.base_offset, dup.last_offset) == (original.base_offset, original.last_offset)
    assert log.log_end_offset == end
    # The oldest two fell out of the window: now they are simply out of sequence.
    assert code_of(lambda: produce(log, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gaps_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0)
    assert code_of(lambda: produce(log, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    produce(log, 2)
    assert code_of(lambda: produce(log, 3, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    produce(log, 0, epoch=1)  # a new epoch restarts at 0
    assert code_of(lambda: produce(log, 2, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # An unknown producer may start at any sequence (state expired or never seen).
    assert produce(log, 77, pid=9).base_offset == log.log_end_offset - 2


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 2**31 - 2, n=1)
    produce(log, 2**31 - 1, n=1)
    produce(log, 0, n=1)
    assert log.last_sequence(PID) == 0


def test_producer_state_survives_restart_via_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0)
    last = produce(log, 2)
    log.close()
    again = open_log(tmp_path)
    dup = produce(again, 2)
    assert dup.duplicate and dup.base_offset == last.base_offset
    assert code_of(lambda: produce(again, 7)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_rebuilt_by_replay_after_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    for seq in range(0, 40, 2):
        produce(log, seq)
    log.flush()
    # Crash: no final snapshot, stale snapshots of older rolls only.
    for p in sorted((tmp_path / "t-0").glob("*.snapshot"))[-2:]:
        p.unlink()
    again = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500), clean_shutdown=False)
    assert again.last_sequence(PID) == 39
    assert produce(again, 38).duplicate


def test_snapshot_file_format(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0, n=3)
    append(log, [b"t"], producer_id=7, epoch=2, seq=0, transactional=True)
    log.close()
    path = tmp_path / "t-0" / "00000000000000000004.snapshot"
    data = path.read_bytes()
    version, crc = struct.unpack_from(">hI", data)
    assert version == 1 and crc == crc32c.crc32c(data[6:])
    (count,) = struct.unpack_from(">i", data, 6)
    assert count == 2 and len(data) == 10 + 2 * 46
    rows = {struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)[0]: struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)
            for i in range(2)}
    assert rows[PID][1:5] == (0, 2, 2, 2)  # epoch, last seq, last offset, offset delta
    assert rows[7][7] == 3  # the open transaction's first offset
    assert {e.producer_id for e in read_snapshot(path)} == {PID, 7}


def test_transactions_lso_markers_and_aborted_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, [b"plain"])                                            # 0
    produce(log, 0, pid=1, txn=True)                                   # 1-2 (txn of pid 1)
    produce(log, 0, pid=2, txn=True)                                   # 3-4 (txn of pid 2)
    assert log.last_stable_offset == 1
    assert log.ongoing_transactions() == {1: 1, 2: 3}
    assert code_of(lambda: produce(log, 2, pid=1)) == ErrorCode.INVALID_TXN_STATE
    res = marker(log, 1, 0, commit=False)                               # 5: abort pid 1
    assert res.completed_txn is not None and res.completed_txn.aborted
    assert log.last_stable_offset == 3
    marker(log, 2, 0, commit=True)                                     # 6: commit pid 2
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.aborted_transactions(0, 7) == [(1, 1)]
    assert log.aborted_transactions(6, 7) == []
    txn = (tmp_path / "t-0" / "00000000000000000000.txnindex").read_bytes()
    assert txn == struct.pack(">hqqqq", 0, 1, 1, 5, 3)
    assert [o for o, _, _ in records(log)] == [0, 1, 2, 3, 4]  # markers are not data
    log.close()
    again = open_log(tmp_path)
    assert again.aborted_transactions(0, 7) == [(1, 1)]
    assert again.last_stable_offset == 7


def test_stale_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0, txn=True)
    marker(log, PID, 0, commit=True, coordinator_epoch=5)
    produce(log, 2, txn=True)
    assert code_of(lambda: marker(log, PID, 0, commit=True, coordinator_epoch=4)) == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_open_txn_is_rebuilt_after_crash_with_txn_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0, pid=1, txn=True)
    marker(log, 1, 0, commit=False)
    produce(log, 0, pid=3, txn=True)
    log.flush()
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()
    again = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=False)
    assert again.ongoing_transactions() == {3: 3}
    assert again.last_stable_offset == 3
    assert again.aborted_transactions(0, 10) == [(1, 0)]


def test_expired_producers_are_forgotten(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=1000)
    append(log, [b"a"], producer_id=PID, epoch=0, seq=0, ts=5_000)
    log.maintenance(5_500)
    assert log.producer(PID) is not None
    log.maintenance(6_001)
    assert log.producer(PID) is None
    assert produce(log, 99).base_offset == 1  # any sequence again
