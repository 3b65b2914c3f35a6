"""One broker per log dir, as Kafka's LogManager keeps it: a ``.lock`` file in each dir, held with an
exclusive lock from start-up (before anything in the dir is read or written) until shutdown.

The lock is ``flock`` on a descriptor of our own: it belongs to that open file, so a second broker in
the same process (the in-process test brokers) is refused like one in another process, and it goes
with the process however it ends (a SIGKILL frees the dir for the next start). The file itself stays:
deleting it on release would let a broker that opened the old file and one that creates a new one
both hold "the" lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class LogDirLockedError(Exception):
    """Another broker, in this process or another, holds a log dir's lock."""


class DirLock:
    """The held lock of one dir; :meth:`release` frees it (idempotent)."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops its flock
            self._fd = None


def lock_dir(directory: Path) -> DirLock:
    """Create the dir if need be and take its lock; LogDirLockedError if a broker holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirLockedError(f"Failed to acquire lock on file {LOCK_FILE} in {directory}. A Kafka instance "
                                "in another process or thread is using this directory.") from None
    except BaseException:
        os.close(fd)
        raise
    return DirLock(directory, fd)


def lock_log_dirs(directories: list[Path]) -> list[DirLock]:
    """Lock every dir, all or none: LogDirLockedError names the first one held elsewhere. A dir that
    cannot be locked for a disk error is left to the log manager, which takes it offline when it
    fails to use it (Kafka's lockLogDirs does the same)."""
    locks: list[DirLock] = []
    try:
        for directory in directories:
            try:
                locks.append(lock_dir(directory))
            except OSError as exc:  # not LogDirLockedError: that one stops the start
                log.warning("could not lock log dir %s: %s", directory, exc)
    except BaseException:
        release_all(locks)
        raise
    return locks


def release_all(locks: list[DirLock]) -> None:
    for lock in locks:
        lock.release()
