"""MirrorMaker 2 in dedicated mode (``bin/connect-mirror-maker.sh mm2.properties``) from a distribution
laid out by ``tools.kafka_dist.layout``, and what the tests read back with stock clients: every record
of a topic, MM2's checkpoint records, committed offsets, topic configs, and the brokers' CPU.

MM2 in dedicated mode has no REST API: it is ready when its work shows on the target cluster, so the
tests wait for that (with a deadline) and fail with the log's last lines if the JVM exits.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.reference_kafka import die_with_parent, stop_process

# The machine's cores are shared: a small heap and the serial collector, as compat-tests/connect.
MM2_ENV = {"KAFKA_HEAP_OPTS": "-Xmx512m",
           "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -Djava.awt.headless=true"}
# From the JVM's start to the first records on the target: ~35 s here on an idle machine.
MIRROR_TIMEOUT = 240.0

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class Checkpoint:
    """A record of MirrorCheckpointTask (connect-mirror-client's Checkpoint): the key is group
    (string), topic (string, the remote topic), partition (int32); the value version (int16),
    upstream offset, downstream offset (int64), metadata (string)."""

    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int


def mm2_properties(src: str, dst: str) -> dict[str, str]:
    """Clusters ``src`` and ``dst``, the one flow src->dst for topic ``orders``, replication factor 1
    for MM2's topics, and intervals of a second or two so the tests see syncs and checkpoints soon.
    ``offset.lag.max`` keeps its default: MM2 syncs the last offset replicated when it commits its
    source offsets, so a group committed at a partition's end translates to that end exactly."""
    props = {
        "clusters": "src, dst",
        "src.bootstrap.servers": src,
        "dst.bootstrap.servers": dst,
        "src->dst.enabled": "true",
        "src->dst.topics": "orders",
        "refresh.topics.interval.seconds": "2",
        "refresh.groups.interval.seconds": "2",
        "sync.topic.configs.interval.seconds": "2",
        "emit.heartbeats.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
    }
    for topic in ("replication", "checkpoints.topic.replication", "heartbeats.topic.replication",
                  "offset-syncs.topic.replication", "offset.storage.replication",
                  "status.storage.replication", "config.storage.replication"):
        props[f"{topic}.factor"] = "1"
    return props


class MirrorMaker:
    """One ``connect-mirror-maker.sh`` JVM."""

    def __init__(self, dist: Path, properties: dict[str, str], workdir: Path) -> None:
        self.dist = dist
        self.properties = properties
        self.workdir = workdir
        self.log_path = workdir / "mm2.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "mm2.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        env = {**os.environ, **MM2_ENV, "LOG_DIR": str(self.workdir / "logs")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(self.dist / "bin" / "connect-mirror-maker.sh"), str(config)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True, preexec_fn=die_with_parent)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=60.0)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def errors(self) -> list[str]:
        try:
            return [line for line in self.log_path.read_text(errors="replace").splitlines() if " ERROR " in line]
        except OSError:
            return []

    def await_(self, condition: Callable[[], Any], what: str, timeout: float = MIRROR_TIMEOUT) -> Any:
        """Poll ``condition`` until it is true (errors count as not yet: a topic not created yet),
        failing at once with the log's tail if the JVM exits."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"MirrorMaker exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if value := condition():
                    return value
            except Exception as exc:  # noqa: BLE001  (the broker's answer while MM2 sets up)
                last = exc
            time.sleep(0.5)
        errors = "\n".join(self.errors()[-10:])
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last!r});"
                             f" MirrorMaker errors:\n{errors}")


MM2_VERSION = "4.3.1"
# The test data: topic ``orders`` on src, its retention.ms, and the group committed at its end.
PARTITIONS = 3
PER_PARTITION = 60  # half produced before MirrorMaker starts, half while it runs
RETENTION_MS = "86400007"
GROUP = "orders-app"


@dataclass(frozen=True)
class Node:
    """A single node of the session's target: where clients connect, and what measures its load."""

    bootstrap: str
    pid: int
    metrics_url: str | None  # grete's GET /metrics; None on Kafka


@dataclass(frozen=True)
class Mirror:
    """The two clusters and the MirrorMaker between them (the ``mirror`` fixture)."""

    src: Node
    dst: Node
    mm2: MirrorMaker


# --- reading back with stock clients ---------------------------------------------------------

def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-compat-reader",
                     "enable.auto.commit": False, "enable.partition.eof": False})


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def read_partitions(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, list[Record]]:
    """Every record of each partition, in offset order: (key, value, headers)."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap)
    out: dict[int, list[Record]] = {}
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            consumer.assign([TopicPartition(topic, p, low)])
            records: list[Record] = []
            deadline = time.monotonic() + timeout
            while len(records) < high - low and time.monotonic() < deadline:
                for m in consumer.consume(500, 1.0):
                    assert m.error() is None, f"{topic}[{p}]: {m.error()}"
                    records.append((m.key(), m.value(), list(m.headers() or [])))
            out[p] = records
    finally:
        consumer.close()
    return out


def _string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, at)
    return data[at + 2:at + 2 + size].decode(), at + 2 + size


def checkpoint(key: bytes, value: bytes) -> Checkpoint:
    group, at = _string(key, 0)
    topic, at = _string(key, at)
    (partition,) = struct.unpack_from(">i", key, at)
    _version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
    return Checkpoint(group, topic, partition, upstream, downstream)


def latest_checkpoints(bootstrap: str, topic: str) -> dict[tuple[str, str, int], Checkpoint]:
    """The last checkpoint of each (group, topic, partition) in ``topic`` (one partition)."""
    latest: dict[tuple[str, str, int], Checkpoint] = {}
    for key, value, _ in read_partitions(bootstrap, topic, 1)[0]:
        assert key is not None and value is not None
        cp = checkpoint(key, value)
        latest[(cp.group, cp.topic, cp.partition)] = cp
    return latest


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets (-1001 where none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                        timeout=10)]
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offsets: list[int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in enumerate(offsets)], asynchronous=False)
    finally:
        consumer.close()


def topic_configs(bootstrap: str, topics: list[str], keys: tuple[str, ...]) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    answers = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    return {res.name: {k: fut.result(timeout=30)[k].value for k in keys} for res, fut in answers.items()}


def topics(bootstrap: str) -> dict[str, int]:
    """Topic name -> partition count."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in md.topics.items()}


# --- what the brokers spend while MM2 runs ------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_COUNTED_TWICE = ('request="FetchConsumer"', 'request="FetchFollower"')


def requests_total(metrics_url: str | None) -> float | None:
    """Requests grete has answered: the sum of ``kafka_network_requestmetrics_requests_total`` but its
    FetchConsumer and FetchFollower series (a Fetch counted again). None without an endpoint."""
    if metrics_url is None:
        return None
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kafka_network_requestmetrics_requests_total{")
               and not any(twice in line for twice in _COUNTED_TWICE))
