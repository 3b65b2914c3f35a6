"""The rdma transport on a real RDMA device (a NIC, or a Soft-RoCE / SoftiWARP link): produce and
consume through a broker with ``direct.transports=shm,rdma``, the records compared with what the shm
and TCP paths read.

Runs only where pyverbs is importable, a device exists (``pyverbs.device.get_device_list()``) and
GRETE_RDMA_ADDRESS names the IP address of that device's interface (rdma_cm binds to it); skipped
with the reason otherwise. Our machines have no device and no rdma_rxe in their kernel, so this has
never run here (docs/direct.md). The second test is replication push over rdma between two brokers
(their rdma listeners on that address, two ports; needs ZooKeeper too). The broker is a child process: pyverbs holds the GIL in rdma_cm's
synchronous calls (the broker's accept waits for the client's establish), so broker and client in
one process would wait on each other.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError, Producer
from kazoo.client import KazooClient

from grete.direct.rdma import RdmaUnavailable, device_names, load_verbs
from grete.testing import broker
from grete.testing.cluster import cluster, free_port
from tests.cluster.conftest import need_zookeeper, wait_until
from tests.cluster.test_direct_replication import PUSH_OVERRIDES, counters, identical, pushing, roles
from tests.cluster.test_replication import create
from tests.direct.conftest import consume, produce


def _why_not() -> str | None:
    try:
        verbs = load_verbs()
    except RdmaUnavailable as exc:
        return str(exc)
    if not device_names(verbs):
        return "no RDMA device here (pyverbs.device.get_device_list() found none)"
    if not os.environ.get("GRETE_RDMA_ADDRESS"):
        return "set GRETE_RDMA_ADDRESS to the IP address of the RDMA device's interface"
    return None


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def test_produce_and_consume_on_a_real_device() -> None:
    overrides = {"direct.transports": "shm,rdma", "direct.rdma.address": os.environ.get("GRETE_RDMA_ADDRESS", ""),
                 "direct.region.bytes": "65536"}
    with broker(overrides, topics={"t": 1}, subprocess=True) as running:
        servers = running.bootstrap_servers
        rdma = {"direct.transport": "rdma"}
        values = [b"v%d" % i for i in range(20)]
        delivered = produce(servers, "t", values[:10], **rdma)
        delivered += produce(servers, "t", values[10:], **rdma, **{"direct.producer.mode": "exclusive"})
        assert [err for err, _ in delivered] == [None] * 20
        assert sorted(offset for _, offset in delivered) == list(range(20))
        over_rdma = consume(servers, "t", 20, **rdma)
        over_shm = consume(servers, "t", 20)
        assert [(m.offset(), m.value()) for m in over_rdma] == [(m.offset(), m.value()) for m in over_shm]
        assert sorted(m.value() for m in over_rdma) == sorted(values)


def test_replication_push_over_rdma_on_a_real_device() -> None:
    """Two brokers registering over rdma first (``direct.transports=rdma,shm``): acks=all with
    min.insync.replicas=2 is acknowledged through pushes (the follower fetches no record byte) and
    the replicas end byte-identical."""
    need_zookeeper()
    address = os.environ.get("GRETE_RDMA_ADDRESS", "")
    overrides = {**PUSH_OVERRIDES, "direct.transports": "rdma,shm", "direct.rdma.address": address}
    per_broker = {b: {"direct.rdma.port": str(free_port()), "metrics.listener": f"http://127.0.0.1:{free_port()}"}
                  for b in (1, 2)}
    with cluster(2, overrides=overrides, broker_overrides=per_broker) as running:
        create(running, "pushed", 1, 2, {"min.insync.replicas": "2"})
        zk = KazooClient(hosts=running.zookeeper.connect)
        zk.start(10)
        try:
            leader, followers = roles(zk, "pushed")
        finally:
            zk.stop()
            zk.close()
        wait_until(lambda: pushing(running, leader, followers), 30, "pushes over rdma")
        before = {b: counters(running, b) for b in running.brokers}
        producer = Producer({"bootstrap.servers": running.bootstrap_servers, "acks": "all", "linger.ms": 2})
        errors: list[KafkaError] = []
        for i in range(2000):
            producer.produce("pushed", value=f"value-{i}".encode() * 4,
                             on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
            producer.poll(0)
        assert producer.flush(30) == 0 and not errors
        after = {b: counters(running, b) for b in running.brokers}
        for f in followers:
            assert after[f]["push_bytes_received"] - before[f]["push_bytes_received"] > 40_000
            assert after[f]["kafka_server_fetcherstats_bytespersec"] == before[f]["kafka_server_fetcherstats_bytespersec"]
        wait_until(lambda: identical(running, "pushed"), 20, "identical replicas")
