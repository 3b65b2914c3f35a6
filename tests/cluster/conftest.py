"""Cluster tests start real processes: Debian's ZooKeeper and grete brokers (grete.testing.cluster)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from grete.testing.cluster import GreteCluster, cluster, zookeeper_available
from tools.kraft_quorum import Quorum

# Small internal topics: a test's first group or transaction should not create 150 logs.
CLUSTER_OVERRIDES = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


def need_zookeeper() -> None:
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    """Three brokers shared by a module's tests (tests that stop brokers start them again)."""
    need_zookeeper()
    with cluster(3, overrides=CLUSTER_OVERRIDES) as running:
        yield running


@pytest.fixture
def zk(grete_cluster: GreteCluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=grete_cluster.zookeeper.connect)
    client.start(10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def started() -> Iterator[list[Any]]:
    """Whatever a KRaft test starts (quorums, brokers), killed at the end, the last started first."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if isinstance(thing, Quorum):
            thing.stop()
        else:
            thing.kill()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def wait_until(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
