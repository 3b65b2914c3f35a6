"""Fixtures for the Spark compat tests.

``spark``: the one SparkSession (local[2], UI off, WARN, 1 shuffle partition) of the test process.
The JVM starts once (about 7 s here); ``spark.jars`` points at the connector jars that
tools/spark_dist.py resolved into the cache, so no Ivy and no network at test time.

``retention_broker``: a second broker of the session's target that applies retention within a
second (Kafka checks every 5 minutes by default), with ``.bootstrap`` and ``.log_dir``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools import kafka_dist
from tools.reference_kafka import ReferenceKafka

FAST_RETENTION = {"log.retention.check.interval.ms": "300"}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipelines.traffic.session import spark_session, unavailable

    missing = unavailable()
    if missing:
        pytest.skip(missing)

    session = spark_session("grete-spark-compat", conf={"spark.sql.shuffle.partitions": "1"})
    yield session
    session.stop()


@dataclass
class SideBroker:
    bootstrap: str
    log_dir: Path


@pytest.fixture(scope="module")
def retention_broker(target: str) -> Iterator[SideBroker]:
    if target == "grete":
        from grete.testing import broker

        with broker(FAST_RETENTION, subprocess=True) as b:
            yield SideBroker(bootstrap=b.bootstrap_servers, log_dir=Path(b.data_dir))
        return
    if target == "grete-kraft":  # the same on a 3-broker KRaft cluster, as the session's target
        from grete.testing.cluster import cluster

        with cluster(3, controllers=1, overrides=FAST_RETENTION) as running:
            yield SideBroker(bootstrap=running.bootstrap_servers, log_dir=running.brokers[1].data_dir)
        return
    version = target.removeprefix("kafka-")
    kafka_dist.fetch(version)
    with ReferenceKafka(version, overrides=FAST_RETENTION) as ref:
        yield SideBroker(bootstrap=ref.bootstrap, log_dir=ref.log_dir)
