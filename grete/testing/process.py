"""A broker in its own process (``grete.testing.broker(subprocess=True)``), for clients or tests
that need process isolation: ``python -m grete.cli serve`` on an ephemeral port, stopped with
SIGTERM (SIGKILL only if it does not stop in time), its temporary directory removed.

The port is the one the broker itself bound (``listeners=...:0``) and reports in its start-up
log line, so there is no window in which another process could take a pre-picked free port.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from grete.broker.child_process import spawn
from grete.broker.server import embedded_config
from grete.testing import _wire
from grete.testing.common import BrokerStartError, scratch_root

_SERVING = re.compile(r"serving on [A-Z0-9_]+://([^,\s]+):(\d+)")
STOP_TIMEOUT_S = 15.0


class BrokerProcess:
    """A running ``grete serve`` child process."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int, data_dir: Path,
                 log_path: Path) -> None:
        self.process = process
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        _wire.create_topic(self.host, self.port, name, partitions, dict(configs or {}))

    def log(self) -> str:
        """The broker's log so far (its stderr)."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait; SIGKILL if it did not stop within ``timeout``. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode


@contextmanager
def broker_process(overrides: Mapping[str, str] | None = None, *, data_dir: str | Path | None = None,
                   topics: Mapping[str, int] | None = None, strict: bool = True,
                   start_timeout: float = 30.0) -> Iterator[BrokerProcess]:
    """Start ``python -m grete.cli serve`` on 127.0.0.1 on a free port; stop it on exit."""
    items = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    items.update(overrides or {})
    # The CLI is lenient about unknown keys; check here so a typo fails fast, naming the key.
    embedded_config([f"{k}={v}" for k, v in items.items()], strict=strict)
    scratch = Path(tempfile.mkdtemp(prefix="grete-proc-", dir=scratch_root()))
    directory = Path(data_dir) if data_dir is not None else scratch / "data"
    items.setdefault("log.dirs", str(directory))
    log_path = scratch / "broker.log"
    command = serve_command(items)
    running: BrokerProcess | None = None
    try:
        process = spawn(command, log_path)
        running = _await_start(process, Path(items["log.dirs"]), log_path, start_timeout)
        for name, count in (topics or {}).items():
            running.create_topic(name, count)
        yield running
    finally:
        if running is not None:
            running.stop()
        elif "process" in locals():
            BrokerProcess(process, "", 0, directory, log_path).stop()
        shutil.rmtree(scratch, ignore_errors=True)


def serve_command(items: Mapping[str, str]) -> list[str]:
    command = [sys.executable, "-m", "grete.cli", "serve"]
    for key, value in items.items():
        command += ["--override", f"{key}={value}"]
    return command


def await_start(process: subprocess.Popen[bytes], data_dir: Path, log_path: Path, timeout: float,
                skip: int = 0) -> BrokerProcess:
    """Wait for the start-up line (after the first ``skip`` characters of the log)."""
    return _await_start(process, data_dir, log_path, timeout, skip)


def _await_start(process: subprocess.Popen[bytes], data_dir: Path, log_path: Path,
                 timeout: float, skip: int = 0) -> BrokerProcess:
    deadline = time.monotonic() + timeout
    while True:
        text = log_path.read_text(errors="replace")[skip:]
        found = _SERVING.search(text)
        if found:
            return BrokerProcess(process, found.group(1), int(found.group(2)), data_dir, log_path)
        if process.poll() is not None:
            raise BrokerStartError(f"grete serve exited with code {process.returncode} before serving:\n"
                                   + _tail(text))
        if time.monotonic() > deadline:
            raise BrokerStartError(f"grete serve did not start within {timeout} s:\n" + _tail(text))
        time.sleep(0.01)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])
