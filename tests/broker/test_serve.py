"""``grete serve`` as a user runs it: a subprocess that logs where it listens, stops cleanly on
SIGTERM with Kafka's clean-shutdown marker, and comes back with everything it acknowledged."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from grete.testing.common import free_port


def _start(data: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "grete.cli", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "serving on" in line:
            assert f"127.0.0.1:{port}" in line
            return proc
        if proc.poll() is not None:
            raise AssertionError(f"grete serve exited with {proc.returncode}: {line}{proc.stdout.read()}")
    proc.kill()
    raise AssertionError("grete serve did not report that it was serving")


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def _consume(port: int, topic: str, count: int) -> list[bytes | None]:
    """Up to ``count`` values of partition 0 from its start (20 s at the most)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"{topic}-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while len(values) < count and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(500, 1) if m.error() is None]
    consumer.close()
    return values


def test_sigterm_stops_cleanly_and_restart_serves_acknowledged_data(tmp_path):
    data, port = tmp_path / "data", free_port()
    proc = _start(data, port)
    try:
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True})
        for i in range(300):
            producer.produce("durable", key=b"k%d" % (i % 5), value=b"v%d" % i)
        assert producer.flush(15) == 0
    finally:
        out = _stop(proc)
    assert "stopped cleanly" in out
    assert (data / ".kafka_cleanshutdown").exists()

    proc = _start(data, port)
    try:
        assert not (data / ".kafka_cleanshutdown").exists()  # removed while running
        assert _consume(port, "durable", 300) == [b"v%d" % i for i in range(300)]
    finally:
        _stop(proc)


def test_bad_override_is_refused_with_its_name(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "grete.cli", "serve", "--override", "num.partitions=lots",
         "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "num.partitions" in result.stderr


def test_port_in_use_is_reported(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "grete.cli", "serve", "--override",
             f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path}"],
            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "address already in use" in result.stderr.lower()


@pytest.mark.parametrize("mode", [
    ["zookeeper.connect=127.0.0.1:1", "broker.id=5", "listeners=SSL://127.0.0.1:0",
     "security.inter.broker.protocol=SSL"],
    ["process.roles=broker", "node.id=5", "controller.listener.names=CONTROLLER",
     "controller.quorum.voters=1@127.0.0.1:1", "listeners=PLAINTEXT://127.0.0.1:0",
     "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"],
], ids=["zookeeper-inter-broker-tls", "kraft-controller-sasl"])
def test_a_cluster_node_whose_own_traffic_asks_for_sasl_or_tls_is_refused(tmp_path, mode):
    """Brokers and controllers connect to each other in PLAINTEXT only: said at start, not left to
    every such connection being closed by its peers."""
    overrides = [arg for item in [*mode, f"log.dirs={tmp_path}"] for arg in ("--override", item)]
    result = subprocess.run([sys.executable, "-m", "grete.cli", "serve", *overrides],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "connect to each other in PLAINTEXT only" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no traceback


def test_a_second_broker_on_the_same_log_dir_is_refused_and_the_first_serves_on(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    proc = _start(data, port)
    try:
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True})
        producer.produce("shared", value=b"before")
        assert producer.flush(15) == 0
        second = subprocess.run(
            [sys.executable, "-m", "grete.cli", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
             "--override", f"log.dirs={data}"], capture_output=True, text=True, timeout=30)
        assert second.returncode == 1, second.stderr
        assert second.stderr == (  # one line, no traceback
            f"grete: Failed to acquire lock on file .lock in {data}. A Kafka instance in another process or "
            "thread is using this directory.\n")
        producer.produce("shared", value=b"after")
        assert producer.flush(15) == 0
        assert _consume(port, "shared", 2) == [b"before", b"after"]
    finally:
        _stop(proc)
