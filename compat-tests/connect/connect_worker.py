"""Kafka Connect distributed workers for compat-tests/connect, run from a distribution laid out by
``tools.kafka_dist.layout`` (``bin/connect-distributed.sh``), and the checks the tests share.

A worker is an external JVM: it is ready when its REST API answers ``GET /connectors`` with 200 (the
herder has joined its group and read the config topic); until then the tests poll with a deadline.
A worker that exits while starting fails the test with its log's last lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import unique, wait_until

from tools.reference_kafka import die_with_parent, free_port, kill_process, stop_process

# Connect 4.3.1 always; Connect 3.9.2's cells run by hand (-m long: one more worker JVM per test).
CONNECT_VERSIONS = [pytest.param("4.3.1", id="connect-4.3.1"),
                    pytest.param("3.9.2", id="connect-3.9.2", marks=pytest.mark.long)]
# The machine's cores are shared: one worker JVM at a time where a test allows it, each small.
WORKER_ENV = {"KAFKA_HEAP_OPTS": "-Xmx512m",
              "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -Djava.awt.headless=true"}
# A worker took 90 s to serve its REST API here with the load average at 12 on two cores.
START_TIMEOUT = 300.0
MOVE_TIMEOUT = 180.0


@dataclass(frozen=True)
class ConnectGroup:
    """What the workers of one Connect cluster share: group.id, internal topics, replication."""

    group_id: str
    replication: int = 1
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def new(cls, replication: int = 1, extra: dict[str, str] | None = None) -> ConnectGroup:
        return cls(unique("connect"), replication, tuple(sorted((extra or {}).items())))

    def properties(self, bootstrap: str, port: int) -> dict[str, str]:
        rf = str(self.replication)
        props = {
            "bootstrap.servers": bootstrap,
            "group.id": self.group_id,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": f"{self.group_id}-offsets",
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": rf,
            "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            "offset.flush.interval.ms": "1000",
            "listeners": f"HTTP://127.0.0.1:{port}",
        }
        props.update(dict(self.extra))
        return props


class Worker:
    """One ``bin/connect-distributed.sh`` process; ``start`` may be called again after ``stop``/``kill``
    (same REST port, same group: a restart)."""

    def __init__(self, dist: Path, group: ConnectGroup, bootstrap: str, workdir: Path, name: str = "w1") -> None:
        self.dist = dist
        self.group = group
        self.bootstrap = bootstrap
        self.port = free_port()
        self.workdir = workdir
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}-{self.starts}.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / f"{self.name}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.group.properties(self.bootstrap, self.port).items()))
        self.starts += 1
        env = {**os.environ, **WORKER_ENV, "LOG_DIR": str(self.workdir / "logs")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(self.dist / "bin" / "connect-distributed.sh"), str(props)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"Connect worker {self.name} exited ({self.proc.returncode}) while "
                                     f"starting:\n{self.log_tail()}")
            if self.request("GET", "/connectors")[0] == 200:
                return
            time.sleep(0.5)
        raise AssertionError(f"Connect worker {self.name}'s REST API not ready after {START_TIMEOUT}s:\n"
                             f"{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM: Connect stops its tasks, which commit their offsets."""
        if self.proc is not None:
            stop_process(self.proc, grace=90.0)

    def kill(self) -> None:
        if self.proc is not None:
            kill_process(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_errors(self) -> list[str]:
        """The ERROR lines of every run of this worker (for the failure message and the findings)."""
        found: list[str] = []
        for path in sorted(self.workdir.glob(f"{self.name}-*.log")):
            found += [line for line in path.read_text(errors="replace").splitlines() if " ERROR " in line]
        return found

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call; (0, None) when nothing listens yet."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")
        except OSError:
            return 0, None

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        status, answer = self.request("PUT", f"/connectors/{name}/config", config)
        assert status in (200, 201), f"PUT /connectors/{name}/config: {status} {answer}"

    def running(self, name: str, tasks: int = 1) -> dict[str, Any] | None:
        """The connector's status once it and ``tasks`` tasks are RUNNING, else None."""
        status, answer = self.request("GET", f"/connectors/{name}/status")
        if status != 200:
            return None
        task_states = [t["state"] for t in answer["tasks"]]
        if answer["connector"]["state"] == "RUNNING" and task_states == ["RUNNING"] * tasks:
            return dict(answer)
        assert "FAILED" not in task_states + [answer["connector"]["state"]], f"{name} failed: {answer}"
        return None

    def await_running(self, *names: str, timeout: float = MOVE_TIMEOUT) -> None:
        for name in names:
            wait_until(lambda n=name: self.running(n), timeout, f"connector {name} and its task RUNNING")


# --- the file connectors ---------------------------------------------------------------------------

@dataclass
class FilePipe:
    """FileStreamSource(source file -> topic) and FileStreamSink(topic -> sink file), one task each."""

    topic: str
    source: Path
    sink: Path
    name: str = "file"

    @property
    def sink_group(self) -> str:
        return f"connect-{self.name}-sink"  # Connect's consumer group for a sink connector

    def install(self, worker: Worker, source: dict[str, str] | None = None) -> None:
        """Both connectors, running; ``source``: more of the source connector's configuration."""
        worker.put_connector(f"{self.name}-source", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(self.source), "topic": self.topic, **(source or {})})
        worker.put_connector(f"{self.name}-sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(self.sink), "topics": self.topic})
        worker.await_running(f"{self.name}-source", f"{self.name}-sink")

    def append(self, lines: list[str]) -> None:
        with open(self.source, "a") as f:
            f.writelines(line + "\n" for line in lines)

    def sunk(self) -> list[str]:
        try:
            return self.sink.read_text().splitlines()
        except FileNotFoundError:
            return []

    def await_sunk(self, count: int, worker: Worker | None = None, timeout: float = MOVE_TIMEOUT) -> list[str]:
        """Wait until the sink file has ``count`` lines, then until the sink's committed offset reaches
        the topic's end: every record produced so far has been written, so a duplicate would show now."""
        def enough() -> bool:
            if worker is not None and not worker.alive():
                raise AssertionError(f"Connect worker exited:\n{worker.log_tail()}")
            return len(self.sunk()) >= count
        try:
            wait_until(enough, timeout, f"{count} lines in {self.sink.name}", interval=0.25)
        except AssertionError as exc:
            errors = "\n".join(worker.log_errors()[-10:]) if worker is not None else ""
            raise AssertionError(f"{exc}; {len(self.sunk())} there; worker errors:\n{errors}") from None
        return self.sunk()

    def settled(self, bootstrap: str, timeout: float = MOVE_TIMEOUT) -> tuple[int, list[str]]:
        """(records in the topic, sink file) once the sink group has committed the topic's end offset."""
        end = wait_until(lambda: _committed_at_end(bootstrap, self.topic, self.sink_group), timeout,
                         f"{self.sink_group}'s committed offset at the end of {self.topic}")
        return int(end), self.sunk()


def _committed_at_end(bootstrap: str, topic: str, group: str) -> int | None:
    """The end offset of partition 0 when ``group`` has committed it (a single-partition topic)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()
    return high if high > 0 and committed == high else None


def read_committed(bootstrap: str, topic: str) -> tuple[list[str], int]:
    """(the values a read_committed reader finds in partition 0 of ``topic``, in order; the partition's
    end offset, which counts transaction markers too)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(f"reading {topic}: {message.error()}")
            values.append((message.value() or b"").decode())
    finally:
        consumer.close()
    return values, end


def numbered(prefix: str, start: int, count: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(start, start + count)]


@contextmanager
def running_worker(worker: Worker) -> Iterator[Worker]:
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
