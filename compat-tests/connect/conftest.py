"""Fixtures of compat-tests/connect: Kafka Connect distributions laid out once per session, fresh
single nodes of the session's target, and compat-tests/cluster's 3-broker clusters (grete, or Kafka
3.9.2 in ZooKeeper mode with ``--target=kafka-3.9``)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType

import pytest

CLUSTER_DIR = Path(__file__).resolve().parent.parent / "cluster"
if str(CLUSTER_DIR) not in sys.path:  # cluster_helpers, cluster_targets
    sys.path.insert(0, str(CLUSTER_DIR))

from grete.testing.cluster import cluster  # noqa: E402
from grete.testing.process import broker_process  # noqa: E402
from tools import kafka_dist  # noqa: E402
from tools.reference_kafka import ReferenceKafka  # noqa: E402


@pytest.fixture(scope="session")
def connect_dist(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``connect_dist(version)``: a distribution of that Kafka version laid out by tools.kafka_dist."""
    laid_out: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in laid_out:
            try:
                laid_out[version] = kafka_dist.layout(version, tmp_path_factory.mktemp(f"kafka-{version}"))
            except (RuntimeError, OSError) as exc:  # no mvn / no network
                pytest.skip(f"Kafka {version} with Connect unavailable: {exc}")
        return laid_out[version]
    return get


def _cluster_conftest() -> ModuleType:
    """compat-tests/cluster/conftest.py under a name of its own (every folder's is ``conftest``)."""
    spec = importlib.util.spec_from_file_location("compat_cluster_conftest", CLUSTER_DIR / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# compat-tests/cluster's fixture: a fresh 3-broker cluster per test file, grete's by default and Kafka
# 3.9.2's in ZooKeeper mode with --target=kafka-3.9; a test module's CLUSTER_OVERRIDES add broker config.
cluster_target = _cluster_conftest().cluster_target


@pytest.fixture
def fresh_broker(target: str) -> Callable[[], AbstractContextManager[str]]:
    """``with fresh_broker() as bootstrap``: a new single node of the session's target each time (with
    ``--target=grete-kraft``, a new 3-broker KRaft cluster)."""
    @contextmanager
    def start() -> Iterator[str]:
        if target == "grete":
            with broker_process() as grete:
                yield grete.bootstrap_servers
            return
        if target == "grete-kraft":  # a new 3-broker KRaft cluster under one grete controller
            with cluster(3, controllers=1) as running:
                yield running.bootstrap_servers
            return
        with ReferenceKafka(target.removeprefix("kafka-")) as kafka:
            yield kafka.bootstrap
    return start
