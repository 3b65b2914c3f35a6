"""A dead broker process is told from a silent one by its evidence (grete/broker/cluster/liveness.py):
its connections end and its port refuses new ones. The controller then fences it at once instead of
waiting for its ZooKeeper session to expire; a paused broker leaves no such evidence and keeps its
place until the session timeout. The session timeout here is long (30 s), so every failover
asserted below happened while the dead broker's registration still stood."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow

SESSION_MS = 30000


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    overrides = {**CLUSTER_OVERRIDES, "zookeeper.session.timeout.ms": str(SESSION_MS),
                 "min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}
    with cluster(3, overrides=overrides) as running:
        yield running


def state(zk: KazooClient, topic: str, partition: int) -> dict[str, object]:
    found: dict[str, object] = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
    return found


def controller(zk: KazooClient) -> int:
    """The active controller's id, -1 while there is none (the znode may vanish between two reads)."""
    try:
        found = zk.get("/controller")[0]
    except NoNodeError:
        return -1
    return int(json.loads(found)["brokerid"]) if found else -1


def create(grete_cluster: GreteCluster, zk: KazooClient, topic: str, leader: int) -> None:
    """One partition on every broker, led by ``leader``, with a full ISR."""
    replicas = [leader] + [b for b in sorted(grete_cluster.brokers) if b != leader]
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    client.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)
    wait_until(lambda: zk.exists(f"/brokers/topics/{topic}/partitions/0/state")
               and len(state(zk, topic, 0)["isr"]) == 3, what="a full ISR")  # type: ignore[arg-type]


def produce(grete_cluster: GreteCluster, topic: str) -> None:
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 20000})
    errors: list[object] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(25) == 0 and errors == [None], errors


def test_a_killed_leader_is_replaced_before_its_session_expires(grete_cluster: GreteCluster, zk: KazooClient,
                                                                topic_name: str) -> None:
    victim = next(b for b in sorted(grete_cluster.brokers) if b != controller(zk))
    create(grete_cluster, zk, topic_name, victim)
    produce(grete_cluster, topic_name)
    grete_cluster.kill_broker(victim)
    killed = time.monotonic()
    wait_until(lambda: state(zk, topic_name, 0)["leader"] != victim, timeout=SESSION_MS / 1000 / 2,
               what="a new leader")
    assert zk.exists(f"/brokers/ids/{victim}") is not None, "the session expired first: no evidence was used"
    assert victim not in state(zk, topic_name, 0)["isr"]  # type: ignore[operator]
    assert time.monotonic() - killed < SESSION_MS / 1000 / 2
    produce(grete_cluster, topic_name)  # acks=all on the two brokers left


def test_a_paused_broker_keeps_its_place_until_its_session_expires(grete_cluster: GreteCluster, zk: KazooClient,
                                                                   topic_name: str) -> None:
    alive = [b for b, p in grete_cluster.brokers.items() if p.process.poll() is None]
    victim = next(b for b in alive if b != controller(zk))
    create_on = [victim] + [b for b in alive if b != victim]
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    client.create_topics([NewTopic(topic_name, 1, replica_assignment=[create_on])])[topic_name].result(30)
    wait_until(lambda: zk.exists(f"/brokers/topics/{topic_name}/partitions/0/state")
               and len(state(zk, topic_name, 0)["isr"]) == 2, what="a full ISR")  # type: ignore[arg-type]
    grete_cluster.pause_broker(victim)
    try:
        time.sleep(4)  # a paused process leaves no evidence: nothing may happen before the session timeout
        assert state(zk, topic_name, 0)["leader"] == victim
    finally:
        grete_cluster.resume_broker(victim)


def test_a_killed_controller_is_replaced_before_its_session_expires(grete_cluster: GreteCluster,
                                                                    zk: KazooClient) -> None:
    victim = controller(zk)
    assert victim > 0
    grete_cluster.kill_broker(victim)
    wait_until(lambda: controller(zk) not in (victim, -1), timeout=SESSION_MS / 1000 / 2, what="a new controller")
    assert zk.exists(f"/brokers/ids/{victim}") is not None, "the session expired first: no evidence was used"
