"""retention.ms, retention.bytes, DeleteRecords and delayed file deletion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage import Log, LogConfig

from ._batches import append, records

HOUR = 3_600_000


def filled(tmp_path: Path, **cfg: object) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000).replace(**cfg), clean_shutdown=True)
    for i in range(40):
        append(log, [b"r" * 80], ts=i * HOUR, now_ms=i * HOUR)  # one record an hour
    return log


def test_retention_ms_deletes_whole_old_segments(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=10 * HOUR, file_delete_delay_ms=60_000)
    now = 45 * HOUR
    before = len(log.segments)
    log.maintenance(now)
    assert len(log.segments) < before
    # Every remaining segment except the first may hold old records, but none is entirely too old.
    for seg in log.segments:
        assert now - seg.largest_timestamp <= 10 * HOUR or seg is log.active
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert records(log)[0][0] == log.log_start_offset
    d = tmp_path / "t-0"
    deleted = [n for n in os.listdir(d) if n.endswith(".deleted")]
    assert deleted and all(n.split(".")[1] in ("log", "index", "timeindex") for n in deleted)
    log.run_pending_deletes(now + 59_999)
    assert set(deleted) <= set(os.listdir(d))
    log.run_pending_deletes(now + 60_000)
    assert not set(deleted) & set(os.listdir(d))
    with pytest.raises(KafkaError) as exc:
        log.read(0, 100)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention_can_empty_the_log_by_rolling(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=HOUR)
    log.maintenance(1000 * HOUR)
    assert log.log_start_offset == log.log_end_offset == 40
    assert len(log.segments) == 1 and log.active.size == 0
    assert append(log, [b"x"]).base_offset == 40


def test_retention_bytes(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_bytes=3000, retention_ms=-1)
    log.maintenance(0)
    assert log.size_bytes <= 3000 + 1000
    assert log.size_bytes > 3000 - 1000
    assert [o for o, _, _ in records(log)] == list(range(log.log_start_offset, 40))


def test_compact_only_topics_ignore_time_retention(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=HOUR, cleanup_policy="compact")
    before = len(log.segments)
    log.maintenance(1000 * HOUR)
    assert len(log.segments) == before


def test_delete_records_before(tmp_path: Path) -> None:
    log = filled(tmp_path)
    assert log.delete_records_before(17) == 17
    assert log.log_start_offset == 17
    assert records(log, 17)[0][0] == 17
    assert all(seg.next_offset > 17 for seg in log.segments)
    with pytest.raises(KafkaError):
        log.read(16, 100)
    assert log.delete_records_before(5) == 17  # never moves back
    with pytest.raises(KafkaError) as exc:
        log.delete_records_before(41)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()
    # Without the manager's checkpoint the start offset falls back to the first segment's base.
    again = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000), clean_shutdown=True, log_start_offset=17)
    assert again.log_start_offset == 17


def test_manager_applies_retention_every_check_interval(tmp_path: Path) -> None:
    """log.retention.check.interval.ms: the first check 30 s after start (Kafka's initial delay), then
    once per interval, though other maintenance runs on every pass."""
    from grete.storage.manager import LogManager

    cfg = LogConfig(segment_bytes=1000, retention_ms=10 * HOUR)
    manager = LogManager([tmp_path], cfg)
    manager.startup(cluster_id="c", node_id=1)
    manager.retention_check_interval_ms = 10 * HOUR
    log = manager.create_log("t", 0, cfg)
    for i in range(40):
        append(log, [b"r" * 80], ts=i * HOUR, now_ms=i * HOUR)
    start = 45 * HOUR  # records 0-34 are past retention
    manager.maintenance(start)
    manager.maintenance(start + 29_999)
    assert log.log_start_offset == 0
    manager.maintenance(start + 30_000)
    first = log.log_start_offset
    assert first > 0
    manager.maintenance(start + 30_000 + 9 * HOUR)  # everything is past retention now, but no check is due
    assert log.log_start_offset == first
    manager.maintenance(start + 30_000 + 10 * HOUR)
    assert log.log_start_offset > first
    manager.shutdown()
