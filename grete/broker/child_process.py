"""Broker processes started by another grete process (``grete host``, ``grete cluster``, the test
clusters): started with their output in a log file and their parent process's death as their
SIGTERM, their ends awaited on a pidfd from the event loop (never polled), described and shown by the last
lines of their log."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOG_TAIL_LINES = 10

# Linux sends the parent-death signal when the *thread* that forked the child ends, not its
# process: a broker started from a short-lived thread (a test starting a broker in the background)
# would be stopped the moment that thread returned. Every child is forked from this one thread,
# which lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grete-spawn")


def spawn(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output in ``log_path``; it gets SIGTERM (a controlled shutdown)
    when this process ends, so no broker outlives what runs it."""
    return _SPAWNER.submit(_popen, command, log_path).result()


def _popen(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                preexec_fn=_die_with_parent, close_fds=True)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def exited(process: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future resolved with ``process``'s exit status when it ends: a parked wait on its pidfd."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    try:
        fd = os.pidfd_open(process.pid)
    except ProcessLookupError:  # already reaped
        future.set_result(process.wait())
        return future

    def ready() -> None:
        if not future.done():
            future.set_result(process.wait())  # a zombie now: reaped at once

    def forget(_: asyncio.Future[int]) -> None:  # resolved, or cancelled with its watch
        loop.remove_reader(fd)
        os.close(fd)
    loop.add_reader(fd, ready)
    future.add_done_callback(forget)
    return future


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log, read from its end (logs grow across restarts)."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 16384))
            return file.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
