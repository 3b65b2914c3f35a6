"""LogManager: startup, per-dir checkpoint files, meta.properties, clean-shutdown marker."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from grete.protocol.errors import KafkaError
from grete.storage import LogConfig, LogManager
from grete.storage.files import uuid_from_kafka

from ._batches import append, records


def manager(tmp_path: Path, dirs: int = 1) -> LogManager:
    return LogManager([tmp_path / f"d{i}" for i in range(dirs)], LogConfig(segment_bytes=2000))


def test_create_append_shutdown_restart(tmp_path: Path) -> None:
    mgr = manager(tmp_path, dirs=2)
    assert mgr.startup(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=1) == {}
    tid = uuid.uuid4()
    logs = [mgr.create_log("orders", p, topic_id=tid) for p in range(4)]
    assert {lg.dir.parent for lg in logs} == {tmp_path / "d0", tmp_path / "d1"}  # spread over dirs
    for p, lg in enumerate(logs):
        for i in range(10 + p):
            append(lg, [f"{p}-{i}".encode() * 20])
    mgr.get_log("orders", 1).delete_records_before(3)  # type: ignore[union-attr]
    mgr.shutdown()
    for d in (tmp_path / "d0", tmp_path / "d1"):
        assert (d / ".kafka_cleanshutdown").exists()
        props = dict(line.split("=", 1) for line in (d / "meta.properties").read_text().splitlines()
                     if "=" in line)
        assert props["version"] == "1" and props["node.id"] == "1"
        assert props["cluster.id"] == "AAAAAAAAAAAAAAAAAAAAAA"
        assert uuid_from_kafka(props["directory.id"])
        text = (d / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert text[0] == "0" and int(text[1]) == len(text) - 2 == 2
        for line in text[2:]:
            topic, part, offset = line.split()
            assert topic == "orders" and int(offset) == 10 + int(part)
    starts = (tmp_path / "d1" / "log-start-offset-checkpoint").read_text().splitlines()
    starts += (tmp_path / "d0" / "log-start-offset-checkpoint").read_text().splitlines()
    assert "orders 1 3" in starts

    again = manager(tmp_path, dirs=2)
    loaded = again.startup(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=1)
    assert sorted(loaded) == [("orders", p) for p in range(4)]
    for p in range(4):
        lg = loaded[("orders", p)]
        assert lg.log_end_offset == 10 + p and lg.topic_id == tid and lg.high_watermark == 10 + p
    assert loaded[("orders", 1)].log_start_offset == 3
    assert not (tmp_path / "d0" / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean


def test_unclean_restart_recovers(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.startup(cluster_id="c", node_id=1)
    lg = mgr.create_log("t", 0)
    for i in range(30):
        append(lg, [f"{i}".encode() * 30])
    mgr.checkpoint()
    lg.flush()
    seg = lg.active.log_path
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x01\x00garbage")
    # no shutdown(): simulated crash
    again = manager(tmp_path)
    loaded = again.startup(cluster_id="c", node_id=1)
    assert loaded[("t", 0)].log_end_offset == 30
    assert [o for o, _, _ in records(loaded[("t", 0)])] == list(range(30))


def test_cluster_id_mismatch_is_refused(tmp_path: Path) -> None:
    manager(tmp_path).startup(cluster_id="one", node_id=1)
    with pytest.raises(KafkaError):
        manager(tmp_path).startup(cluster_id="two", node_id=1)


def test_delete_log_and_leftover_delete_dirs(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.startup()
    lg = mgr.create_log("gone", 0)
    append(lg, [b"x"])
    res = lg.read(0, 100)
    mgr.delete_log("gone", 0)
    assert not [n for n in os.listdir(tmp_path / "d0") if n.startswith("gone")]
    assert res.read_bytes()  # slices taken before the delete still read
    leftover = tmp_path / "d0" / f"old-0.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    mgr.shutdown()
    mgr2 = manager(tmp_path)
    assert mgr2.startup() == {}
    assert not leftover.exists()


def test_offline_partition_does_not_stop_startup(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.startup()
    bad = mgr.create_log("bad", 0)
    good = mgr.create_log("good", 0)
    for i in range(40):
        append(bad, [f"{i}".encode() * 30])
        append(good, [b"ok"])
    mgr.shutdown()
    first = sorted((tmp_path / "d0" / "bad-0").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[100] ^= 1
    first.write_bytes(data)
    (tmp_path / "d0" / "bad-0" / (first.name[:20] + ".index")).unlink()
    mgr2 = manager(tmp_path)
    loaded = mgr2.startup()
    assert ("good", 0) in loaded and ("bad", 0) not in loaded
    assert "corrupt" in mgr2.offline[("bad", 0)] and str(first) in mgr2.offline[("bad", 0)]


def test_rolled_segments_are_flushed_in_the_background(tmp_path: Path) -> None:
    import time

    mgr = manager(tmp_path)
    mgr.startup()
    lg = mgr.create_log("t", 0)
    for i in range(60):
        append(lg, [f"{i}".encode() * 50])
    assert len(lg.segments) > 2 and lg.recovery_point == 0
    mgr.maintenance()
    deadline = time.time() + 10
    while lg.recovery_point != lg.active.base_offset and time.time() < deadline:
        time.sleep(0.01)
    assert lg.recovery_point == lg.active.base_offset  # everything before the active segment
    mgr.checkpoint()
    text = (tmp_path / "d0" / "recovery-point-offset-checkpoint").read_text()
    assert f"t 0 {lg.active.base_offset}" in text


def test_cordoned_dirs_take_no_new_logs_while_another_can(tmp_path: Path) -> None:
    """cordoned.log.dirs (KIP-1066): new logs go to the dirs left; with every dir cordoned the
    broker refuses new topics before this layer, so the fallback keeps existing replicas working."""
    mgr = manager(tmp_path, dirs=3)
    mgr.startup(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=1)
    mgr.cordoned = {tmp_path / "d0", tmp_path / "d2"}
    logs = [mgr.create_log("placed", p) for p in range(4)]
    assert {lg.dir.parent for lg in logs} == {tmp_path / "d1"}
    mgr.cordoned = {tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"}
    assert mgr.create_log("fallback", 0).dir.parent in {tmp_path / "d0", tmp_path / "d2"}  # emptiest
    mgr.shutdown()


def test_an_unchanged_checkpoint_is_not_rewritten(tmp_path: Path) -> None:
    """An idle broker does not rewrite its offset checkpoints every few seconds: a file is written
    again when what it says changed (or when it is missing)."""
    mgr = manager(tmp_path)
    mgr.startup(cluster_id="c", node_id=1)
    lg = mgr.create_log("t", 0)
    append(lg, [b"a"])
    lg.high_watermark = 1
    mgr.checkpoint()
    hw_file = tmp_path / "d0" / "replication-offset-checkpoint"
    recovery_file = tmp_path / "d0" / "recovery-point-offset-checkpoint"
    written = hw_file.stat().st_ino, recovery_file.stat().st_ino  # each write replaces the file
    mgr.checkpoint()
    assert (hw_file.stat().st_ino, recovery_file.stat().st_ino) == written
    append(lg, [b"b"])
    lg.high_watermark = 2
    mgr.checkpoint()
    assert hw_file.stat().st_ino != written[0] and "t 0 2" in hw_file.read_text()
    assert recovery_file.stat().st_ino == written[1]  # the recovery point did not move
    recovery_file.unlink()
    mgr.checkpoint()
    assert recovery_file.exists()
    mgr.shutdown()


def test_the_clean_shutdown_files_name_the_broker_epoch(tmp_path: Path) -> None:
    """A KRaft broker stopped cleanly tells the controller the epoch it had (PreviousBrokerEpoch):
    every dir's ``.kafka_cleanshutdown`` holds it in Kafka's JSON; a dir without one (a crash) or
    with another epoch makes it -1."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, LogConfig())
    mgr.startup()
    assert mgr.previous_broker_epoch == -1  # a new broker
    mgr.shutdown(broker_epoch=42)
    assert (dirs[0] / ".kafka_cleanshutdown").read_text() == '{"version": 0, "brokerEpoch": 42}'
    again = LogManager(dirs, LogConfig())
    again.startup()
    assert again.previous_broker_epoch == 42
    again.shutdown(broker_epoch=43)
    (dirs[1] / ".kafka_cleanshutdown").unlink()
    crashed = LogManager(dirs, LogConfig())
    crashed.startup()
    assert crashed.previous_broker_epoch == -1
    crashed.shutdown()
