"""Storage faults: each log dir fails alone (KIP-112), atomic writes never leave debris, and the
io seam makes chosen system calls fail. Real faults where this machine allows (a full tmpfs,
a read-only remount, a removed directory), injected ones (EIO) everywhere else."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode
from grete.storage import LogConfig, LogManager, io
from grete.storage.failure import KafkaStorageException
from grete.storage.files import atomic_write
from grete.storage.log import Log

from ._batches import append, make_batch, records

CONFIG = LogConfig(segment_bytes=64 * 1024, segment_index_bytes=64 * 1024)


def _mount_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount not installed"
    return None


needs_mount = pytest.mark.skipif(_mount_usable() is not None, reason=str(_mount_usable()))


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs: a log dir that fills up for real."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    try:
        _run("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def injector() -> Iterator[io.FaultInjector]:
    inj = io.inject()
    try:
        yield inj
    finally:
        io.reset()


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[Path, BaseException, list[tuple[str, int]], int]] = []

    def __call__(self, log_dir: Path, error: BaseException, partitions: list[tuple[str, int]]) -> None:
        self.calls.append((log_dir, error, partitions, threading.get_ident()))


def start(dirs: list[Path]) -> tuple[LogManager, Listener]:
    mgr = LogManager(dirs, CONFIG)
    listener = Listener()
    mgr.on_dir_offline(listener)
    mgr.startup(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=1)
    return mgr, listener


def offline_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is offline" in r.getMessage()]


# ==== a real full disk ==============================================================================
@needs_mount
def test_full_tmpfs_takes_its_dir_offline_and_loses_nothing_acknowledged(
        tmp_path: Path, tmpfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    other = tmp_path / "big"
    mgr, listener = start([tmpfs, other])
    small = mgr.create_log("t", 0)
    big = mgr.create_log("t", 1)
    assert (small.log_dir, big.log_dir) == (tmpfs, other)  # fewest partitions first
    acked: list[tuple[int, bytes]] = []
    with pytest.raises(KafkaStorageException) as err:
        for i in range(1000):  # 2 MB fill up long before 1000 x 20 KB
            value = f"{i:06d}".encode() * 3400
            res = append(small, [value])
            acked.append((res.base_offset, value))
    assert acked and err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (err.value.log_dir, err.value.partition) == (tmpfs, ("t", 0))
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC

    assert list(mgr.offline_dirs) == [tmpfs] and "No space left" in mgr.offline_dirs[tmpfs]
    assert [(c[0], c[2]) for c in listener.calls] == [(tmpfs, [("t", 0)])]
    with pytest.raises(KafkaStorageException):  # refused at once, no second announcement
        append(small, [b"again"])
    with pytest.raises(KafkaStorageException):
        small.read(0, 1000)
    assert len(offline_lines(caplog)) == 1 and str(tmpfs) in offline_lines(caplog)[0]
    assert len(listener.calls) == 1 and not mgr.all_dirs_offline

    for i in range(50):  # the other dir goes on
        append(big, [f"big-{i}".encode() * 100])
    assert mgr.create_log("t", 2).log_dir == other
    mgr.maintenance()
    mgr.checkpoint()
    mgr.shutdown()
    assert not (tmpfs / ".kafka_cleanshutdown").exists() and (other / ".kafka_cleanshutdown").exists()

    _run("mount", "-o", "remount,size=8m", str(tmpfs))
    again, listener2 = start([tmpfs, other])
    assert not again.offline_dirs and not listener2.calls
    reopened = again.get_log("t", 0)
    assert reopened is not None and reopened.log_dir == tmpfs
    on_disk = {o: v for o, _, v in records(reopened)}
    assert all(on_disk.get(o) == v for o, v in acked)  # every acknowledged record survived
    assert reopened.log_end_offset >= len(acked)
    assert len(records(again.get_log("t", 1))) == 50  # type: ignore[arg-type]
    append(reopened, [b"after remount"])
    again.shutdown()


@needs_mount
def test_atomic_write_on_a_full_disk_keeps_the_old_version_and_no_temp_file(tmpfs: Path) -> None:
    target = tmpfs / "meta.properties"
    atomic_write(target, b"old version\n")
    filler = tmpfs / "filler"
    with pytest.raises(OSError):
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    with pytest.raises(OSError) as err:
        atomic_write(target, b"new version " * 50_000)
    assert err.value.errno == errno.ENOSPC and str(target) in str(err.value)
    assert target.read_bytes() == b"old version\n"
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler", "meta.properties"]


@needs_mount
def test_read_only_dir_goes_offline_at_startup_and_comes_back(tmp_path: Path, tmpfs: Path) -> None:
    other = tmp_path / "big"
    mgr, _ = start([tmpfs, other])
    append(mgr.create_log("t", 0), [b"kept"])
    mgr.shutdown()
    _run("mount", "-o", "remount,ro", str(tmpfs))
    ro, listener = start([tmpfs, other])
    assert list(ro.offline_dirs) == [tmpfs] and "Read-only" in ro.offline_dirs[tmpfs]
    assert len(listener.calls) == 1 and ro.online_dirs == [other]
    assert ro.create_log("t", 1).log_dir == other
    ro.shutdown()
    _run("mount", "-o", "remount,rw", str(tmpfs))
    rw, _ = start([tmpfs, other])
    assert not rw.offline_dirs and records(rw.get_log("t", 0)) == [(0, None, b"kept")]  # type: ignore[arg-type]
    rw.shutdown()


# ==== a removed directory, no root needed =============================================================
def test_removed_dir_goes_offline_once_and_the_other_serves(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, listener = start([d0, d1])
    gone, kept = mgr.create_log("t", 0), mgr.create_log("t", 1)
    append(gone, [b"x"])
    shutil.rmtree(d0)
    mgr.checkpoint()  # the first write of a new file there fails
    assert list(mgr.offline_dirs) == [d0] and [c[2] for c in listener.calls] == [[("t", 0)]]
    assert gone.offline is not None
    for _ in range(3):
        with pytest.raises(KafkaStorageException):
            append(gone, [b"y"])
        with pytest.raises(KafkaStorageException):
            gone.roll()
    mgr.checkpoint()
    mgr.maintenance()
    assert len(offline_lines(caplog)) == 1 and len(listener.calls) == 1
    assert append(kept, [b"z"]).base_offset == 0 and mgr.create_log("t", 2).log_dir == d1
    with pytest.raises(KafkaStorageException):
        mgr.delete_log("t", 0)
    assert mgr.get_log("t", 0) is gone  # still known: never recreated in another dir by accident
    mgr.shutdown()
    assert (d1 / ".kafka_cleanshutdown").exists()


def test_last_dir_gone_is_reported_and_startup_without_a_usable_dir_fails(tmp_path: Path) -> None:
    d0 = tmp_path / "d0"
    mgr, listener = start([d0])
    shutil.rmtree(d0)
    mgr.checkpoint()
    assert mgr.all_dirs_offline and len(listener.calls) == 1
    with pytest.raises(KafkaStorageException) as err:
        mgr.create_log("t", 0)
    assert "no online log dir" in str(err.value)
    mgr.shutdown()
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(KafkaStorageException) as err:
        LogManager([not_a_dir], CONFIG).startup()
    assert str(not_a_dir) in str(err.value)


# ==== injected faults ============================================================================
def _write(lg: Log) -> None:
    append(lg, [b"w" * 100])


def _fsync(lg: Log) -> None:
    append(lg, [b"f" * 100])
    lg.flush()


def _read(lg: Log) -> None:
    lg.read(0, 10_000)


def _roll(lg: Log) -> None:  # rename: pending deletes rename segments to .deleted
    lg.delete_records_before(lg.high_watermark)
    lg.roll()
    lg.delete_records_before(lg.log_end_offset)


@pytest.mark.parametrize(("kind", "action"), [("write", _write), ("fsync", _fsync), ("read", _read)])
def test_injected_eio_takes_the_dir_offline(tmp_path: Path, injector: io.FaultInjector, kind: str,
                                            action: object, caplog: pytest.LogCaptureFixture) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, listener = start([d0, d1])
    lg, other = mgr.create_log("t", 0), mgr.create_log("t", 1)
    for _ in range(3):
        append(lg, [b"before" * 50])
    injector.fail(d0, kind, errno.EIO)
    with pytest.raises(KafkaStorageException) as err:
        action(lg)  # type: ignore[operator]
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.EIO
    assert [h[0] for h in injector.hits] == [kind] and injector.hits[0][1].startswith(str(d0))
    assert list(mgr.offline_dirs) == [d0] and "Input/output error" in mgr.offline_dirs[d0]
    assert [(c[0], c[2], c[3]) for c in listener.calls] == [(d0, [("t", 0)], threading.get_ident())]
    assert len(offline_lines(caplog)) == 1
    assert not any(r.exc_info for r in caplog.records)  # one line, no traceback
    _write(other)
    other.flush()
    _read(other)
    mgr.shutdown()


def test_injected_rename_failure_in_a_checkpoint(tmp_path: Path, injector: io.FaultInjector) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, listener = start([d0, d1])
    append(mgr.create_log("t", 0), [b"a"])
    before = (d0 / "recovery-point-offset-checkpoint").read_text()
    injector.fail(d0, "rename", errno.EIO)
    mgr.checkpoint()
    assert list(mgr.offline_dirs) == [d0] and len(listener.calls) == 1
    assert (d0 / "recovery-point-offset-checkpoint").read_text() == before  # old version intact
    assert not list(d0.glob("*.tmp"))
    mgr.shutdown()


def test_injected_rename_failure_while_deleting_segments(tmp_path: Path, injector: io.FaultInjector) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, _ = start([d0, d1])
    lg = mgr.create_log("t", 0)
    append(lg, [b"a"])
    injector.fail(d0, "rename", errno.EROFS)  # as if the dir had become read-only
    with pytest.raises(KafkaStorageException):
        _roll(lg)
    assert "Read-only" in mgr.offline_dirs[d0]
    mgr.shutdown()


def test_injected_open_failure_when_creating_a_partition(tmp_path: Path, injector: io.FaultInjector) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, listener = start([d0, d1])
    injector.fail(d0, "open", errno.EIO)
    with pytest.raises(KafkaStorageException) as err:
        mgr.create_log("t", 0)
    assert err.value.log_dir == d0 and len(listener.calls) == 1
    assert mgr.create_log("t", 0).log_dir == d1  # never placed on the offline dir again
    mgr.shutdown()


def test_failure_on_the_flusher_thread_is_announced_on_the_owners_thread(
        tmp_path: Path, injector: io.FaultInjector) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, listener = start([d0, d1])
    lg = mgr.create_log("t", 0)
    append(lg, [b"a"])
    mgr.maintenance()  # writes the checkpoints now, so the next pass does not (every 5 s)
    lg.roll()
    injector.fail(d0, "fsync", errno.EIO)
    mgr.maintenance()  # hands the rolled segment's fsync to the flusher thread
    mgr._flusher.submit(lambda: None).result(timeout=10)  # one flusher thread: the fsync task is done
    assert list(mgr.offline_dirs) == [d0] and listener.calls == []  # not on the flusher thread
    mgr.maintenance()
    assert [(c[0], c[3]) for c in listener.calls] == [(d0, threading.get_ident())]
    mgr.shutdown()


def test_injector_counts_and_clears(tmp_path: Path, injector: io.FaultInjector) -> None:
    lg = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    injector.fail(tmp_path / "elsewhere", "write", errno.EIO)
    append(lg, [b"not under the faulty dir"])
    injector.fail(tmp_path, "write", errno.ENOSPC, times=2)
    assert [h[2] for h in injector.hits] == []
    with pytest.raises(KafkaStorageException):
        append(lg, [b"x"])
    with pytest.raises(ValueError):
        injector.fail(tmp_path, "chmod")
    assert len(injector.hits) == 1 and lg.offline is not None and "No space" in lg.offline


def test_production_calls_are_the_os_functions() -> None:
    io.reset()
    assert io.pwrite is os.pwrite and io.fsync is os.fsync and io.replace is os.replace
    assert io.injected() is None


@pytest.mark.parametrize("kind", ["open", "write", "fsync", "rename"])
def test_atomic_write_failure_leaves_no_temp_and_the_old_version(
        tmp_path: Path, injector: io.FaultInjector, kind: str) -> None:
    target = tmp_path / "replication-offset-checkpoint"
    atomic_write(target, b"0\n0\n")
    injector.fail(tmp_path, kind, errno.EIO)
    with pytest.raises(OSError) as err:
        atomic_write(target, b"0\n1\nt 0 5\n")
    assert err.value.errno == errno.EIO and str(target) in str(err.value)
    assert target.read_bytes() == b"0\n0\n" and [p.name for p in tmp_path.iterdir()] == [target.name]
    atomic_write(target, b"0\n1\nt 0 5\n")  # the fault was one call: the next write works
    assert target.read_bytes() == b"0\n1\nt 0 5\n"


def test_log_without_a_manager_goes_offline_alone(tmp_path: Path, injector: io.FaultInjector,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    lg = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    injector.fail(tmp_path, "write", errno.EIO)
    caplog.set_level(logging.ERROR)
    with pytest.raises(KafkaStorageException):
        lg.append(make_batch([b"x"]), leader_epoch=0, now_ms=1)
    with pytest.raises(KafkaStorageException):
        list(lg.batches())
    assert len(offline_lines(caplog)) == 1
    lg.close()


def test_a_partition_in_two_dirs_is_offline_and_never_recreated(tmp_path: Path) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    mgr, _ = start([d0, d1])
    append(mgr.create_log("t", 0), [b"one"])
    mgr.shutdown()
    shutil.copytree(d0 / "t-0", d1 / "t-0")
    again, listener = start([d0, d1])
    assert again.get_log("t", 0) is None and "more than one log dir" in again.offline[("t", 0)]
    assert not listener.calls and not again.offline_dirs  # a partition problem, not a dir failure
    with pytest.raises(KafkaStorageException) as err:
        again.create_log("t", 0)
    assert err.value.partition == ("t", 0)
    again.delete_log("t", 0)  # a topic deletion clears both copies
    assert not (d0 / "t-0").exists() and not (d1 / "t-0").exists()
    assert again.create_log("t", 0).log_end_offset == 0
    again.shutdown()
