"""When its last log dir fails the node stops at once with status 1, the failing file named in its
log (Kafka halts there), even as a KRaft node whose own metadata log is in that dir: it does not wait
for a controlled shutdown that cannot be answered."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from grete.testing.process import broker_process

LIMIT_S = 20.0  # a controlled shutdown that waits for its controller takes a minute here


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_the_node_stops_when_its_last_log_dir_fails(small_disk: Path) -> None:
    with broker_process({"num.partitions": "1"}, data_dir=small_disk / "data") as node:
        producer = Producer({"bootstrap.servers": node.bootstrap_servers, "linger.ms": 5, "acks": "1",
                             "message.timeout.ms": 20_000})
        value = b"x" * 100_000
        deadline = time.monotonic() + 60
        while "every log dir has failed" not in node.log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the disk filled up and the node did not say so"
            try:
                for _ in range(10):
                    producer.produce("fill", value)
            except BufferError:
                pass
            producer.poll(0.05)
        failed_at = time.monotonic()
        while node.process.poll() is None and time.monotonic() - failed_at < LIMIT_S:
            time.sleep(0.1)
        log = node.log_path.read_text(errors="replace")
        assert node.process.returncode == 1, log[-3000:]
        assert f"No space left on device: '{small_disk / 'data' / 'fill-0'}'" in log  # the log it happened in
        producer.purge()
