"""A broker of a KRaft cluster whose only log dir fills up stops at once with status 1 (Kafka halts),
and the cluster goes on: its partitions' leadership and ISR move to the other replicas, and an
acks=all producer of a replication-factor-3 topic loses nothing it was told was written."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.cluster import cluster
from tests.small_disk import fill_until_halted, small_disk

pytestmark = pytest.mark.slow

LIMIT_S = 20.0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "small", "30m") as mounted:
        yield mounted


def test_a_broker_with_a_full_disk_stops_and_the_cluster_goes_on(disk: Path, tmp_path: Path) -> None:
    with cluster(3, directory=tmp_path / "c", controllers=1,
                 broker_overrides={2: {"log.dirs": str(disk / "data")}}) as nodes:
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap_servers})
        admin.create_topics([NewTopic("t", num_partitions=3, replication_factor=3)])["t"].result(30)
        producer = Producer({"bootstrap.servers": nodes.bootstrap_servers, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 60_000})
        errors: list[str] = []
        producer_ok = [0]

        def delivered(err: object, _msg: object) -> None:
            if err is None:
                producer_ok[0] += 1
            else:
                errors.append(str(err))

        broker2 = nodes.brokers[2]
        fill_until_halted(producer, "t", b"x" * 50_000, broker2.process, broker2.log_path, timeout=90,
                          limit_s=LIMIT_S, batch=20, delivered=delivered)
        assert broker2.process.returncode == 1, broker2.log_path.read_text(errors="replace")[-3000:]
        for _ in range(200):
            producer.produce("t", b"after", callback=delivered)
        assert producer.flush(60) == 0
        assert not errors and producer_ok[0] > 200
        partitions = admin.list_topics("t", timeout=10).topics["t"].partitions
        assert all(p.leader in (1, 3) and 2 not in p.isrs for p in partitions.values())


def test_a_broker_whose_metadata_log_dir_fails_stops(disk: Path, tmp_path: Path) -> None:
    """Its data dirs fine, its metadata log's full: the broker cannot follow the quorum any more and
    stops with status 1 (Kafka's metadata log dir failure is fatal too), saying which log."""
    with cluster(3, directory=tmp_path / "c", controllers=1,
                 broker_overrides={2: {"metadata.log.dir": str(disk / "metadata")}}) as nodes:
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap_servers})
        filler = disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "count=64"], capture_output=True)
        broker2 = nodes.brokers[2]
        deadline = time.monotonic() + 60
        created = 0
        while broker2.process.poll() is None:
            assert time.monotonic() < deadline, broker2.log_path.read_text(errors="replace")[-3000:]
            names = [f"m{created + i}" for i in range(20)]
            admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
            created += len(names)
            time.sleep(0.2)
        log = broker2.log_path.read_text(errors="replace")
        assert broker2.process.returncode == 1, log[-3000:]
        assert f"the metadata log {disk / 'metadata' / '__cluster_metadata-0'} is offline" in log
        # Fenced once the controller sees its process gone (at once; the session timeout at worst).
        deadline = time.monotonic() + 15
        while admin.list_topics(timeout=10).brokers.keys() != {1, 3}:
            assert time.monotonic() < deadline, "the stopped broker is still listed"
            time.sleep(0.2)
