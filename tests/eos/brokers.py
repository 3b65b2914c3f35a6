"""Brokers the exactly-once checker can crash: a real process, SIGKILLed and restarted on the same
data directory and the same port (clients keep their bootstrap address across the crash).

    GRETE_TEST_TARGET=grete      grete serve, as a subprocess (the default)
    GRETE_TEST_TARGET=kafka-4    Apache Kafka 4.x via tools/reference_kafka.py (also kafka-3.9)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from tools.reference_kafka import (
    ReferenceKafka,
    die_with_parent,
    free_port,
    kill_process,
    metadata_ok,
    stop_process,
)

REPO = Path(__file__).resolve().parents[2]

# Single-partition internal topics: creating 50 of each on first use costs seconds on two cores.
INTERNAL_TOPICS = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    # Abandoned transactions are aborted within a second or two of their timeout, not 10 s.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


class CrashableBroker(Protocol):
    bootstrap: str
    kind: str

    def kill(self) -> None: ...
    def restart(self) -> None: ...
    def stop(self) -> None: ...
    def log_tail(self, lines: int = 30) -> str: ...


def target() -> str:
    return os.environ.get("GRETE_TEST_TARGET") or "grete"


def start_broker(which: str | None = None) -> CrashableBroker:
    which = which or target()
    if which == "grete":
        grete = GreteServe()
        grete.restart()
        return grete
    ref = KafkaBroker(which.removeprefix("kafka-"))
    return ref


class GreteServe:
    """``grete serve`` on a fixed port and data directory, so a restart is the same broker again."""

    kind = "grete"

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="grete-eos-"))
        self.data_dir = self.workdir / "data"
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = self.workdir / "broker.log"
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        listener = f"PLAINTEXT://{self.bootstrap}"
        overrides = {"listeners": listener, "advertised.listeners": listener, "log.dirs": str(self.data_dir),
                     **INTERNAL_TOPICS}
        cmd = [sys.executable, "-m", "grete.cli", "serve"]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def restart(self) -> None:
        if self.proc is not None:
            self.kill()
        with open(self.log_path, "ab") as log:
            log.write(b"\n==== start ====\n")
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                         preexec_fn=die_with_parent)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"grete exited with {self.proc.returncode}: {self.log_tail()}")
            if metadata_ok(self.bootstrap, timeout=1.0):
                return
            time.sleep(0.1)
        raise TimeoutError(f"grete not serving after {self.start_timeout}s: {self.log_tail()}")

    def kill(self) -> None:
        if self.proc is None:
            return
        kill_process(self.proc)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=10.0)
            self.proc = None
        if not os.environ.get("GRETE_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class KafkaBroker:
    """tools.reference_kafka.ReferenceKafka behind the same four calls."""

    def __init__(self, version: str) -> None:
        self.ref = ReferenceKafka(version, overrides=dict(INTERNAL_TOPICS), log_level="WARN")
        self.ref.start()
        self.bootstrap = self.ref.bootstrap
        self.kind = self.ref.kind

    def kill(self) -> None:
        self.ref.kill()

    def restart(self) -> None:
        self.ref.restart()

    def stop(self) -> None:
        self.ref.stop()

    def log_tail(self, lines: int = 30) -> str:
        return self.ref.log_tail(lines)
