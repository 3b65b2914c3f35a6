"""The two cluster targets of compat-tests/cluster and how to start them (imported by conftest.py and
the tests; a module name of its own, since every folder's conftest.py is called ``conftest``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from tools import kafka_dist

GRETE = "grete"
KAFKA = "kafka-3.9-zk"
BROKERS = 3
# Small internal topics on both sides (50 partitions x RF 3 would dominate a test's time).
OVERRIDES = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
             "offsets.topic.replication.factor": "3"}


@dataclass
class ClusterTarget:
    """One running cluster: ``.cluster`` is a GreteCluster or a KafkaZkCluster (same interface)."""

    name: str
    cluster: Any
    started_in: float

    @property
    def is_grete(self) -> bool:
        return self.name == GRETE

    @property
    def bootstrap(self) -> str:
        """Every running broker."""
        return str(self.cluster.bootstrap_servers)

    @property
    def zk_connect(self) -> str:
        return str(self.cluster.zookeeper.connect)

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.cluster.brokers)

    def running(self) -> list[int]:
        return sorted(i for i, b in self.cluster.brokers.items() if b.process.poll() is None)

    def broker_bootstrap(self, broker_id: int) -> str:
        return str(self.cluster.brokers[broker_id].bootstrap_servers)


def await_full_metadata(cluster: Any, timeout: float = 60.0) -> None:
    """Every running broker's Metadata lists every running broker and a controller among them: the
    same readiness for both targets (a broker that serves before it has heard of the others would
    refuse RF 3)."""
    from cluster_helpers import metadata, wait_until

    running = {i for i, b in cluster.brokers.items() if b.process.poll() is None}

    def complete(bootstrap: str) -> bool:
        md = metadata(bootstrap, timeout=5)
        return set(md.brokers) == running and md.controller_id in running

    for broker_id in sorted(running):
        wait_until(lambda b=cluster.brokers[broker_id].bootstrap_servers: complete(b), timeout,
                   f"broker {broker_id}'s Metadata listing brokers {sorted(running)} and a controller")


def start_cluster(name: str, overrides: Mapping[str, str]) -> Any:
    """The context manager that runs a ``name`` cluster of BROKERS brokers."""
    if name == GRETE:
        from grete.testing.cluster import cluster, zookeeper_available

        missing = zookeeper_available()
        if missing:
            pytest.skip(missing)
        return cluster(BROKERS, overrides=overrides)
    from grete.testing.cluster import zookeeper_available
    from tools.reference_kafka_zk import kafka_zk_cluster

    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    try:
        kafka_dist.fetch("3.9.2")
    except Exception as exc:  # no mvn / no network: the reference runs cannot happen here
        pytest.skip(f"Kafka 3.9.2 jars unavailable: {exc}")
    return kafka_zk_cluster(BROKERS, overrides=overrides)


