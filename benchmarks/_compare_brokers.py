"""Brokers for ``benchmarks/compare.py``: grete and the reference Kafka, started the same way and measured
the same way (process start to the first acknowledged produce; RSS from /proc/<pid>/status).

Both keep their data in a fresh ``tempfile.mkdtemp()`` directory, so both use the same disk.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

from tools import kafka_dist, reference_kafka
from tools.reference_kafka import ReferenceKafka, free_port, stop_process


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (includes all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_acked_produce(bootstrap: str, started: float, timeout: float = 60.0) -> float:
    """Seconds from ``started`` until one record is acknowledged (auto-created topic, acks=1).

    librdkafka retries the connection itself; its reconnect backoff is cut to 1 ms so the figure is the
    broker's, not the client's wait."""
    from confluent_kafka import Producer

    acked: list[float] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked.append(time.perf_counter())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                         "reconnect.backoff.ms": 1, "reconnect.backoff.max.ms": 5,
                         "retry.backoff.ms": 5, "retry.backoff.max.ms": 20,
                         "topic.metadata.refresh.fast.interval.ms": 10,
                         "log_level": 0, "logger": reference_kafka._silent_logger()})
    deadline = time.perf_counter() + timeout
    producer.produce("bench-start", value=b"x", on_delivery=on_delivery)
    while not acked and time.perf_counter() < deadline:
        producer.poll(0.001)
    if not acked:
        raise RuntimeError(f"no acknowledged produce from {bootstrap} in {timeout} s")
    producer.flush(5)
    return acked[0] - started


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a thread; ``peak`` is the maximum seen."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except (OSError, RuntimeError):
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Broker:
    """Common surface: ``name``, ``bootstrap``, ``pid``, ``start_seconds``, ``idle_rss_mb``."""

    name = "?"
    bootstrap = ""
    pid = 0
    start_seconds = 0.0
    idle_rss_mb = 0.0

    def __enter__(self) -> Broker:
        self.start()
        try:
            time.sleep(2.0)  # let start-up garbage settle before calling the process idle
            self.idle_rss_mb = rss_mb(self.pid)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class Grete(Broker):
    """``python -m grete.cli serve`` as a subprocess (optionally under a profiler command prefix), from
    this checkout or from ``root`` (another checkout: a before/after comparison in one run).

    ``group.initial.rebalance.delay.ms=0`` as the reference Kafka is configured: a benchmark measures
    the broker, not a configured wait."""

    name = "grete"

    def __init__(self, prefix: list[str] | None = None, root: Path | None = None, name: str = "grete") -> None:
        self.name = name
        self.root = root
        self.prefix = prefix or []
        self.data = Path(tempfile.mkdtemp(prefix="compare-grete-"))
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "grete.cli", "serve", "--log-level", "WARNING",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
             "--override", f"log.dirs={self.data}", "--override", "group.initial.rebalance.delay.ms=0"],
            start_new_session=True, cwd=self.root, env=self._env())
        self.pid = self.proc.pid
        self.start_seconds = first_acked_produce(self.bootstrap, started)

    def _env(self) -> dict[str, str] | None:
        if self.root is None:
            return None
        return {**os.environ, "PYTHONPATH": str(self.root)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGINT first: a profiler wrapper (cProfile) writes its output on KeyboardInterrupt.
            self.proc.send_signal(signal.SIGINT if self.prefix else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)
        shutil.rmtree(self.data, ignore_errors=True)


class Kafka(Broker):
    """The reference Kafka (KRaft, one node). The start clock begins after ``kafka-storage format``
    (a separate JVM run that grete has no counterpart of) and ends at the first acknowledged produce."""

    def __init__(self, version: str) -> None:
        self.ref = ReferenceKafka(version, log_level="WARN", jvm=kafka_dist.KAFKA_SERVER_JVM)
        self.name = f"kafka-{self.ref.version}"

    def start(self) -> None:
        ref = self.ref
        kafka_dist.fetch(ref.version)
        ref.workdir = Path(tempfile.mkdtemp(prefix=f"compare-kafka-{ref.version}-"))
        ref.port, ref.controller_port = free_port(), free_port()
        while ref.controller_port == ref.port:
            ref.controller_port = free_port()
        config = ref._write_config()
        ref._format(config)
        started = time.perf_counter()
        ref._launch(config)
        assert ref.proc is not None
        self.pid = ref.proc.pid
        self.bootstrap = ref.bootstrap
        self.start_seconds = first_acked_produce(self.bootstrap, started)

    def stop(self) -> None:
        self.ref.stop()
