"""Batch builders and readers for storage tests (on top of the shared record codec)."""

from __future__ import annotations

import time

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.records.record import Record, absolute_records, build_batch
from grete.storage import AppendResult, Log


def make_batch(values: list[bytes | None], keys: list[bytes | None] | None = None, *, ts: int | None = None,
               ts_step: int = 1, producer_id: int = -1, epoch: int = -1, seq: int = -1,
               transactional: bool = False, compression: int = 0) -> RecordBatch:
    if ts is None:  # producer expiry compares batch timestamps with the wall clock
        ts = int(time.time() * 1000)
    records = [Record(i, i * ts_step, None if keys is None else keys[i], v) for i, v in enumerate(values)]
    buf = build_batch(records, base_timestamp=ts, producer_id=producer_id, producer_epoch=epoch,
                      base_sequence=seq, transactional=transactional, compression=compression)
    return RecordBatch(buf)


def append(log: Log, values: list[bytes | None], keys: list[bytes | None] | None = None, *,
           now_ms: int = 2_000, leader_epoch: int = 0, **kw: int | bool) -> AppendResult:
    """Append as the only replica: the high watermark moves to the log end, as the partition moves
    it after every append of a replica that is its own ISR."""
    result = log.append(make_batch(values, keys, **kw), leader_epoch=leader_epoch, now_ms=now_ms)  # type: ignore[arg-type]
    log.high_watermark = log.log_end_offset
    return result


def marker(log: Log, producer_id: int, epoch: int, *, commit: bool, coordinator_epoch: int = 0,
           now_ms: int = 3_000) -> AppendResult:
    batch = RecordBatch(build_end_txn_marker(producer_id, epoch, commit, coordinator_epoch, now_ms))
    result = log.append_control(batch, leader_epoch=0, now_ms=now_ms)
    log.high_watermark = log.log_end_offset
    return result


def records(log: Log, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record at or after ``start``, read back from disk."""
    out = []
    for batch in log.batches(start):
        assert batch.crc_ok()
        if batch.is_control:
            continue
        out.extend((r.offset, r.key, r.value) for r in absolute_records(batch) if r.offset >= start)
    return out


def fetched_batches(data: bytes) -> list[RecordBatch]:
    """Split fetched bytes into batches, insisting they are whole and valid."""
    out, pos = [], 0
    while pos < len(data):
        b = RecordBatch(data, pos)
        assert pos + b.size <= len(data), "partial batch in a read result"
        assert b.crc_ok()
        out.append(b)
        pos += b.size
    return out
