"""When its last log dir fails the node stops at once with status 1, the failing file named in its
log (Kafka halts there), even as a KRaft node whose own metadata log is in that dir: it does not wait
for a controlled shutdown that cannot be answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from grete.testing.process import broker_process
from tests.small_disk import fill_until_halted, small_disk

LIMIT_S = 20.0  # a controlled shutdown that waits for its controller takes a minute here


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "small", "8m") as mounted:
        yield mounted


def test_the_node_stops_when_its_last_log_dir_fails(disk: Path) -> None:
    with broker_process({"num.partitions": "1"}, data_dir=disk / "data") as node:
        producer = Producer({"bootstrap.servers": node.bootstrap_servers, "linger.ms": 5, "acks": "1",
                             "message.timeout.ms": 20_000})
        fill_until_halted(producer, "fill", b"x" * 100_000, node.process, node.log_path, timeout=60, limit_s=LIMIT_S)
        log = node.log_path.read_text(errors="replace")
        assert node.process.returncode == 1, log[-3000:]
        assert f"No space left on device: '{disk / 'data' / 'fill-0'}'" in log  # the log it happened in
        producer.purge()
