"""The traffic pipeline unchanged on a Spark standalone cluster (a master and a worker started from the
PySpark installation) and three grete brokers: ``python -m pipelines.traffic run --master spark://…``
gives the reference's answers, computed by executors on the worker. Minutes on a shared box, so
marked ``long`` (run with ``-m long``)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grete.testing.cluster import GreteCluster
from tests.pipelines.conftest import SparkStandalone

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
SECONDS = 4
WINDOWS_PER_SECOND = 128  # compat-tests/spark/test_spark_traffic.py


def test_run_on_a_standalone_spark_cluster(three_brokers: GreteCluster, spark_standalone: SparkStandalone,
                                           tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex[:8]
    argv = ["run", "--master", spark_standalone.master_url, "--bootstrap", three_brokers.bootstrap_servers,
            "--flow-topic", f"flow-{run_id}", "--speed-topic", f"speed-{run_id}", "--output-topic", f"out-{run_id}",
            "--duration", str(SECONDS), "--checkpoint", str(tmp_path / "ckpt")]
    done = subprocess.run([sys.executable, "-m", "pipelines.traffic", *argv], cwd=REPO, capture_output=True,
                          timeout=1000)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    assert done.returncode == 0, f"{report}\n{done.stderr.decode(errors='replace')[-3000:]}"
    assert report["expected_windows"] == report["output_windows"] == SECONDS * WINDOWS_PER_SECOND, report
    # The tasks ran in an executor on the worker, not in the driver.
    assert [p.name for p in spark_standalone.work_dir.glob("app-*/*/stderr")], "no executor ran on the worker"
