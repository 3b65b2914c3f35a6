"""``grete serve`` as a user runs it: a subprocess that logs where it listens, stops cleanly on
SIGTERM with Kafka's clean-shutdown marker, and comes back with everything it acknowledged."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

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
