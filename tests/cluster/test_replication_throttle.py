"""A throttled reassignment (KIP-73) as an operator runs one: ``kafka-reassign-partitions --execute
--throttle`` sets the brokers' ``*.replication.throttled.rate`` and the topic's throttled replicas,
the new replica then copies no faster than the rate (after the quota's first windows), and
``--verify`` once it is done removes the throttle; and the leader's side alone, set with
``kafka-configs``. Only an upper bound on progress is asserted: a loaded machine copies slower,
never faster."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.cluster import cluster
from tools import kafka_dist

pytestmark = pytest.mark.slow

KAFKA = "4.3.1"
RATE = 200_000  # bytes a second
RECORDS = 16_000  # 1 KB each: 16 MB, far more than the quota's first windows let through


def _fill(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1, replica_assignment=[[1]])])["t"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    for _ in range(RECORDS):
        producer.produce("t", b"x" * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0


def _at_most_the_rate(data_dir: Path, began: float) -> None:
    """What the new replica copied: the quota's first windows let a burst through (the rate is
    measured over 11 windows of a second, Kafka's default), then the rate holds; one fetch's worth
    may overshoot."""
    copied = _copied(data_dir)
    elapsed = time.monotonic() - began
    allowed = RATE * (10 + elapsed) + 2 * 1_048_576
    assert copied < allowed, f"{copied} bytes copied in {elapsed:.1f} s at a throttle of {RATE} B/s"
    assert copied < RECORDS * 1000, "the whole partition was copied: the throttle did nothing"


def _copied(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in (data_dir / "t-0").glob("*.log")) if (data_dir / "t-0").exists() else 0


@pytest.mark.parametrize("mode", ["kraft", "zookeeper"])
def test_a_throttled_reassignment_copies_at_the_rate(mode: str, tmp_path: Path) -> None:
    kafka_dist.fetch(KAFKA)
    with cluster(3, directory=tmp_path / "c", controllers=1 if mode == "kraft" else 0) as nodes:
        bootstrap = nodes.bootstrap_servers
        _fill(bootstrap)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}))
        started = kafka_dist.run_tool(KAFKA, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                      "--reassignment-json-file", str(plan), "--execute", "--throttle", str(RATE))
        assert started.returncode == 0, started.stdout + started.stderr
        began = time.monotonic()
        time.sleep(6)
        _at_most_the_rate(nodes.brokers[2].data_dir, began)
        # The rate raised (--additional --throttle), the reassignment completes, and --verify then
        # removes the throttle configs.
        faster = kafka_dist.run_tool(KAFKA, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                     "--reassignment-json-file", str(plan), "--execute", "--additional",
                                     "--throttle", str(100 * RATE))
        assert faster.returncode == 0, faster.stdout + faster.stderr
        deadline = time.monotonic() + 120
        while True:
            verified = kafka_dist.run_tool(KAFKA, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                           "--reassignment-json-file", str(plan), "--verify")
            if "Clearing broker-level throttles" in verified.stdout:
                break
            assert time.monotonic() < deadline, verified.stdout + verified.stderr
            time.sleep(1)
        described = kafka_dist.run_tool(KAFKA, "kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                                        "--entity-type", "topics", "--entity-name", "t")
        assert "throttled.replicas" not in described.stdout, described.stdout


def test_the_leader_s_throttle_alone(tmp_path: Path) -> None:
    """Only the leader's side set (``kafka-configs``): broker 1 sends its lagging new follower no
    more than its ``leader.replication.throttled.rate``."""
    kafka_dist.fetch(KAFKA)
    with cluster(3, directory=tmp_path / "c", controllers=1) as nodes:
        bootstrap = nodes.bootstrap_servers
        _fill(bootstrap)
        for kind, name, config in (("brokers", "1", f"leader.replication.throttled.rate={RATE}"),
                                   ("topics", "t", "leader.replication.throttled.replicas=0:1")):
            done = kafka_dist.run_tool(KAFKA, "kafka-configs", "--bootstrap-server", bootstrap, "--alter",
                                       "--entity-type", kind, "--entity-name", name, "--add-config", config)
            assert done.returncode == 0, done.stdout + done.stderr
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}))
        started = kafka_dist.run_tool(KAFKA, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                      "--reassignment-json-file", str(plan), "--execute")
        assert started.returncode == 0, started.stdout + started.stderr
        began = time.monotonic()
        time.sleep(6)
        _at_most_the_rate(nodes.brokers[2].data_dir, began)
