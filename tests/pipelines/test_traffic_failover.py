"""The traffic pipeline on three brokers with a failure in the middle of the run: the leader of an
input topic or of the output topic SIGKILLed, or the Spark job SIGKILLed and restarted from its
checkpoint. Each run must give exactly the answers of a run without the failure: the reference check
(pipelines/traffic/reference.py) finds no missing, extra, wrong or duplicated window and no input
record missing or written twice. The broker kills run the user's own command,
``python -m pipelines.traffic run``, and kill the leader from outside once the run is under way, on
grete and, as the reference, on Apache Kafka 3.9.2: the answers must be the same.

Minutes each on a shared box (JVM start, publishing, the job's micro-batches, the check's Spark batch
reads), so marked ``long``: deselected by default, run with ``-m long``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from confluent_kafka.admin import AdminClient

from grete.testing.cluster import GreteCluster, zookeeper_available
from pipelines.traffic import topics
from pipelines.traffic.__main__ import create_topics, drain, parser, publish, snapshot, start_job, verify
from pipelines.traffic.generator import Stats
from tests.cluster.conftest import wait_until
from tests.pipelines.conftest import CLUSTER_DEFAULTS
from tools.reference_kafka_zk import VERSION as KAFKA_ZK_VERSION
from tools.reference_kafka_zk import kafka_zk_cluster

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
SECONDS = 10  # of publishing: the kill lands a few seconds in, the rest runs on the cluster it leaves
WINDOWS_PER_SECOND = 128  # 200 pairs/s over 19 lanes (compat-tests/spark/test_spark_traffic.py)
KILL_AFTER_FLOW_RECORDS = 400  # two seconds of flow events
RUN_TIMEOUT_S = 900.0


class Brokers(Protocol):
    """What a leader-kill run needs of a cluster: grete's and Kafka's test clusters both have it."""

    @property
    def bootstrap_servers(self) -> str: ...

    def kill_broker(self, broker_id: int) -> None: ...


@pytest.fixture(params=["grete", f"kafka-{KAFKA_ZK_VERSION}"])
def brokers(request: pytest.FixtureRequest) -> Iterator[Brokers]:
    """Three brokers of grete or, as the reference, of Apache Kafka 3.9.2 in ZooKeeper mode (its
    ZooKeeper session timeout 6 s, as grete's test clusters use), with the same topic defaults: the
    run must give the same answers on both."""
    if request.param == "grete":
        yield request.getfixturevalue("three_brokers")
        return
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    with kafka_zk_cluster(3, overrides={**CLUSTER_DEFAULTS, "zookeeper.session.timeout.ms": "6000"}) as running:
        yield running


def topic_args(bootstrap: str) -> list[str]:
    """The command line's bootstrap and topic options, fresh topics for each run."""
    run_id = uuid.uuid4().hex[:8]
    return ["--bootstrap", bootstrap, "--flow-topic", f"traffic-flow-{run_id}",
            "--speed-topic", f"traffic-speed-{run_id}", "--output-topic", f"traffic-out-{run_id}"]


def leader(bootstrap: str, topic: str) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(meta.topics[topic].partitions[0].leader)


def high_watermark(bootstrap: str, topic: str) -> int:
    return sum(hw for _, hw in topics.end_offsets(bootstrap, topic).values())


def kill_leader(brokers: Brokers, topic: str) -> int:
    """SIGKILL the broker leading ``topic``'s partition 0; returns it once another broker leads."""
    victim = leader(brokers.bootstrap_servers, topic)
    brokers.kill_broker(victim)
    wait_until(lambda: leader(brokers.bootstrap_servers, topic) not in (victim, -1), timeout=30,
               what=f"a new leader of {topic} after broker {victim} was killed")
    return victim


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts, each in its own process group (the Python driver and its JVM),
    killed with their groups if the test leaves them running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def start(spawned: list[subprocess.Popen[bytes]], argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.traffic", *argv], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    spawned.append(proc)
    return proc


def run_with_leader_killed(brokers: Brokers, spawned: list[subprocess.Popen[bytes]], tmp_path: Path,
                           watched: str, threshold: int, victim_topic: str) -> dict[str, Any]:
    """``python -m pipelines.traffic run`` on the cluster; once ``watched`` holds ``threshold``
    records, SIGKILL the leader of ``victim_topic``. Returns the run's report; asserts it exits 0."""
    argv = topic_args(brokers.bootstrap_servers)
    names = dict(zip(("flow", "speed", "out"), argv[3::2], strict=True))
    cli = parser().parse_args(["run", *argv])
    create_topics(cli)  # here, so that the leaders are known; the run uses them as they are
    log = tmp_path / "run.log"
    proc = start(spawned, ["run", *argv, "--duration", str(SECONDS), "--checkpoint", str(tmp_path / "ckpt")], log)
    wait_until(lambda: proc.poll() is not None or high_watermark(cli.bootstrap, names[watched]) >= threshold,
               timeout=RUN_TIMEOUT_S, what=f"{threshold} records in {names[watched]}")
    assert proc.poll() is None, f"the run ended before the kill:\n{log.read_text()[-3000:]}"
    victim = kill_leader(brokers, names[victim_topic])
    out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    report: dict[str, Any] = json.loads(out) if out.strip() else {}
    print(json.dumps({"killed": victim, **report}))  # the failover figures, shown with -rP
    assert proc.returncode == 0, f"broker {victim} killed; exit {proc.returncode}, report {report}\n" \
                                 f"{log.read_text()[-3000:]}"
    return report


def assert_no_fault_answers(report: dict[str, Any]) -> None:
    assert report["expected_windows"] == report["output_windows"] == SECONDS * WINDOWS_PER_SECOND, report
    for kind in ("missing", "extra", "wrong", "duplicated"):
        assert report[f"{kind}_windows"] == 0, report
    assert report["input_duplicates"] == report["input_missing"] == 0, report


def test_input_leader_killed_mid_run(brokers: Brokers, spawned: list[subprocess.Popen[bytes]],
                                     tmp_path: Path) -> None:
    report = run_with_leader_killed(brokers, spawned, tmp_path, "flow", KILL_AFTER_FLOW_RECORDS, "flow")
    assert_no_fault_answers(report)


def test_output_leader_killed_mid_run(brokers: Brokers, spawned: list[subprocess.Popen[bytes]],
                                      tmp_path: Path) -> None:
    report = run_with_leader_killed(brokers, spawned, tmp_path, "out", 1, "out")
    assert_no_fault_answers(report)


def test_job_killed_and_restarted_from_its_checkpoint(three_brokers: GreteCluster, spark: Any,
                                                      spawned: list[subprocess.Popen[bytes]],
                                                      tmp_path: Path) -> None:
    """The job runs as ``python -m pipelines.traffic stream``; once it has written output, its process
    group (driver and JVM) is SIGKILLed while the input goes on, and the job restarts from the same
    checkpoint in this process, where it is drained and checked like ``run`` does."""
    argv = topic_args(three_brokers.bootstrap_servers)
    args = parser().parse_args(["run", *argv, "--duration", str(SECONDS)])
    create_topics(args)
    before, checkpoint = snapshot(args), tmp_path / "ckpt"
    log = tmp_path / "stream.log"
    job = start(spawned, ["stream", *argv, "--checkpoint", str(checkpoint)], log)
    # Each source records its starting ("latest") offsets in the checkpoint before its first batch.
    wait_until(lambda: job.poll() is not None or all((checkpoint / f"sources/{s}/0").exists() for s in (0, 1)),
               timeout=RUN_TIMEOUT_S, what="the job's starting offsets")
    assert job.poll() is None, log.read_text()[-3000:]
    started_ms = int(time.time() * 1000)
    stats, publisher = Stats(), threading.Thread(target=lambda: vars(stats).update(vars(publish(args, end=True))))
    publisher.start()
    wait_until(lambda: job.poll() is not None or high_watermark(args.bootstrap, args.output_topic) > 0,
               timeout=RUN_TIMEOUT_S, what="the job's first output")
    assert job.poll() is None, log.read_text()[-3000:]
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    query = start_job(spark, args, str(checkpoint))
    publisher.join(RUN_TIMEOUT_S)
    assert stats.sent, "the publisher failed"
    assert drain(query, args.drain) is None
    report, ok = verify(spark, args, before, stats, started_ms)
    print(json.dumps(report, default=str))
    assert_no_fault_answers(report)
    assert ok, report

