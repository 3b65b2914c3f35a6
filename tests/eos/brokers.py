"""Brokers the exactly-once checker can crash: a real process, SIGKILLed and restarted on the same
data directory and the same port (clients keep their bootstrap address across the crash).

    GRETE_TEST_TARGET=grete      grete serve, as a subprocess (the default)
    GRETE_TEST_TARGET=kafka-4    Apache Kafka 4.x via tools/reference_kafka.py (also kafka-3.9)

``dropped_markers()`` is the broker's own admission that it completed a transaction without writing
its marker to some partition (Apache Kafka logs this; see tests/eos/README.md). The audit uses it to
tell that known reference defect apart from anything else; grete never admits to one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DroppedMarker:
    """The broker completed ``txn_id``'s transaction without a marker on ``topic``-``partition``."""

    txn_id: str
    topic: str
    partition: int
    at: float  # wall-clock seconds (time.time() scale)


class CrashableBroker(Protocol):
    bootstrap: str
    kind: str

    def kill(self) -> None: ...
    def restart(self) -> None: ...
    def stop(self) -> None: ...
    def log_tail(self, lines: int = 30) -> str: ...
    def dropped_markers(self) -> list[DroppedMarker]: ...


# Kafka's TransactionMarkerChannelManager (3.x and 4.x, INFO): when the metadata cache has no leader
# endpoint for a partition it assumes the topic was deleted and completes the transaction without
# that partition's marker. A broker restarting after SIGKILL fences its own previous incarnation
# (leader -1 for every partition) while its coordinator is still sending markers: they are dropped.
_DROPPED = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] INFO \[Transaction Marker Channel Manager \d+\]: "
    r"Couldn't find leader endpoint for partitions Set\(([^)]*)\) while trying to send transaction "
    r"markers for (\S+), these partitions are likely deleted", re.MULTILINE)


def parse_dropped_markers(server_log: str) -> list[DroppedMarker]:
    """Every marker a Kafka server.log says was skipped (log timestamps are the broker's local time)."""
    out: list[DroppedMarker] = []
    for m in _DROPPED.finditer(server_log):
        stamp, millis, partitions, txn_id = m.groups()
        at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
        for tp in partitions.split(", "):
            topic, _, part = tp.strip().rpartition("-")
            out.append(DroppedMarker(txn_id, topic, int(part), at))
    return out


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

    def dropped_markers(self) -> list[DroppedMarker]:
        return []  # grete writes every marker or keeps the transaction open: no excuses


class KafkaBroker:
    """tools.reference_kafka.ReferenceKafka behind the same four calls."""

    def __init__(self, version: str) -> None:
        # INFO: dropped_markers() reads an INFO line; GRETE_EOS_BROKER_LOG=DEBUG for more.
        level = os.environ.get("GRETE_EOS_BROKER_LOG", "INFO")
        self.ref = ReferenceKafka(version, overrides=dict(INTERNAL_TOPICS), log_level=level)
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

    def dropped_markers(self) -> list[DroppedMarker]:
        try:
            return parse_dropped_markers(self.ref.server_log.read_text(errors="replace"))
        except (OSError, AssertionError):  # AssertionError: stopped, the directory is gone
            return []
