"""Fixtures for the traffic pipeline's tests: ``three_brokers``, a grete cluster (ZooKeeper mode) whose
topics get replication factor 3 and min.insync.replicas 2 by default, fresh for each test since the
failover tests kill brokers; ``spark``, the test process's SparkSession (started on first use);
``spark_standalone``, a Spark standalone master and worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grete.testing.cluster import GreteCluster, cluster, free_port, zookeeper_available

CLUSTER_DEFAULTS = {"default.replication.factor": "3", "min.insync.replicas": "2",
                    "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
DAEMON_START_S = 120.0  # a JVM on a busy 2-core box


@pytest.fixture
def three_brokers() -> Iterator[GreteCluster]:
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    with cluster(3, overrides=CLUSTER_DEFAULTS) as running:
        yield running


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipelines.traffic.session import spark_session, unavailable

    missing = unavailable()
    if missing:
        pytest.skip(missing)
    session = spark_session("grete-traffic-tests")
    yield session
    session.stop()


@dataclass
class SparkStandalone:
    master_url: str
    work_dir: Path  # the worker's: one app-* directory per application that ran executors on it


def daemon(home: Path, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A Spark daemon through ``bin/spark-class`` (which execs java), in its own process group."""
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("wb") as out:
        return subprocess.Popen([str(home / "bin" / "spark-class"), *argv], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def await_line(proc: subprocess.Popen[bytes], log: Path, line: str) -> None:
    deadline = time.monotonic() + DAEMON_START_S
    while line not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {line!r} in {log}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[SparkStandalone]:
    """A Spark standalone cluster from the PySpark installation: a master and one worker (2 cores,
    1 GB for executors) on 127.0.0.1, each a JVM of 256 MB."""
    from pipelines.traffic.session import unavailable

    missing = unavailable()
    if missing:
        pytest.skip(missing)
    from pyspark.find_spark_home import _find_spark_home

    home, port, work = Path(_find_spark_home()), free_port(), tmp_path / "spark-work"
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(daemon(home, ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                     str(port), "--webui-port", str(free_port())], tmp_path / "master.log"))
        await_line(started[0], tmp_path / "master.log", "I have been elected leader")
        started.append(daemon(home, ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                                     "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work), url],
                              tmp_path / "worker.log"))
        await_line(started[1], tmp_path / "worker.log", "Successfully registered with master")
        yield SparkStandalone(url, work)
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(60)
