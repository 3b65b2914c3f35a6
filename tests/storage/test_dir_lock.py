"""The ``.lock`` of a log dir: one holder at a time, in this process or another; freed on release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grete.storage.dir_lock import LogDirLockedError, lock_dir, lock_log_dirs, release_all


def test_a_second_lock_in_this_process_is_refused_until_the_first_is_released(tmp_path: Path) -> None:
    first = lock_dir(tmp_path / "d")
    assert (tmp_path / "d" / ".lock").is_file()
    with pytest.raises(LogDirLockedError) as refused:
        lock_dir(tmp_path / "d")
    assert str(refused.value) == (f"Failed to acquire lock on file .lock in {tmp_path / 'd'}. A Kafka instance "
                                  "in another process or thread is using this directory.")
    first.release()
    first.release()  # idempotent
    again = lock_dir(tmp_path / "d")
    again.release()
    assert (tmp_path / "d" / ".lock").is_file()  # the file stays: only the lock goes


def test_a_lock_held_by_another_process_is_refused(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from grete.storage.dir_lock import lock_dir; "
         f"lock_dir(Path({str(tmp_path)!r})); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LogDirLockedError, match=str(tmp_path)):
            lock_dir(tmp_path)
    finally:
        holder.kill()
        holder.wait(10)
    lock_dir(tmp_path).release()  # the holder's end freed it


def test_locking_several_dirs_is_all_or_none(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    held = lock_dir(dirs[1])
    with pytest.raises(LogDirLockedError, match="in " + str(dirs[1])):
        lock_log_dirs(dirs)
    lock_dir(dirs[0]).release()  # not kept by the refused attempt
    held.release()
    locks = lock_log_dirs(dirs)
    assert [lock.directory for lock in locks] == dirs
    release_all(locks)


def test_a_dir_with_a_disk_error_is_left_to_the_log_manager(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a dir")
    locks = lock_log_dirs([tmp_path / "file", tmp_path / "ok"])
    assert [lock.directory for lock in locks] == [tmp_path / "ok"]
    release_all(locks)
