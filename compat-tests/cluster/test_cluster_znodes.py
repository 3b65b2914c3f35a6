"""ZooKeeper's content, znode by znode, after the same operations on a grete cluster and on an Apache
Kafka 3.9.2 cluster (ZooKeeper mode).

The operations (``run_operations``): create ``zk-alpha`` (3 partitions, RF 3) and ``zk-beta`` (1
partition, RF 3) with AdminClient; ``kafka-configs --alter`` two configs of zk-alpha; ``kafka-topics
--alter --partitions 5`` on zk-alpha; delete zk-beta with AdminClient and wait until it is gone.

The reference is a second, separate Kafka 3.9.2 cluster put through the same operations
(``kafka_reference``, once per session). Each cell compares its own snapshot with it after
normalisation: ports, timestamps, cluster and topic ids and the random replica placement are replaced
by what they must satisfy (the broker's own port, a decimal string, 22 characters of URL-safe base64,
a permutation of the brokers); everything else, znode versions included, must be equal. The Kafka
cell thus also proves that the normalisation leaves nothing run-dependent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cluster_helpers as h
import pytest
from cluster_targets import KAFKA, OVERRIDES, ClusterTarget, await_full_metadata, start_cluster

ALPHA, BETA = "zk-alpha", "zk-beta"
KAFKA_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


@dataclass
class Captured:
    nodes: dict[str, h.Znode]
    ports: dict[int, int]  # broker id -> port

    def json(self, path: str) -> Any:
        return h.loads(self.nodes[path].data)


def run_operations(cluster: Any) -> Captured:
    bootstrap = cluster.bootstrap_servers
    h.create_topic(bootstrap, ALPHA, partitions=3, replication=3)
    h.create_topic(bootstrap, BETA, partitions=1, replication=3)
    h.tool_ok("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
              "--entity-name", ALPHA, "--add-config", "retention.ms=12345,cleanup.policy=compact")
    h.tool_ok("kafka-topics", "--bootstrap-server", bootstrap, "--alter", "--topic", ALPHA, "--partitions", "5")
    client = h.admin(bootstrap)
    client.delete_topics([BETA], operation_timeout=60)[BETA].result(90)
    zk = h.zk_client(cluster.zookeeper.connect)
    try:
        h.wait_until(lambda: (s := h.partitions_seen(bootstrap, ALPHA)) and len(s) == 5
                     and all(v.leader >= 0 and len(v.isr) == 3 for v in s.values()), what="zk-alpha with 5 partitions")
        h.wait_until(lambda: zk.exists(f"/brokers/topics/{BETA}") is None and not zk.get_children("/admin/delete_topics")
                     and zk.exists(f"/config/topics/{BETA}") is None, what="zk-beta deleted")
        h.wait_until(lambda: all(zk.exists(f"/brokers/topics/{ALPHA}/partitions/{p}/state") for p in range(5)),
                     what="state znodes of the added partitions")
        time.sleep(1.0)  # anything a controller writes right after (it should write nothing)
        nodes = h.snapshot(zk)
    finally:
        zk.stop()
    return Captured(nodes, {i: b.port for i, b in cluster.brokers.items()})


@pytest.fixture(scope="session")
def kafka_reference() -> Captured:
    """The same operations on a separate Kafka 3.9.2 cluster, stopped as soon as its ZooKeeper is read."""
    with start_cluster(KAFKA, OVERRIDES) as running:
        await_full_metadata(running)
        return run_operations(running)


@pytest.fixture(scope="module")
def captured(cluster_target: ClusterTarget) -> Iterator[Captured]:
    yield run_operations(cluster_target.cluster)


@pytest.fixture
def both(captured: Captured, kafka_reference: Captured) -> tuple[Captured, Captured]:
    """(this target's snapshot, the Kafka reference's)."""
    return captured, kafka_reference


# --- normalisation ----------------------------------------------------------------------------

def timestamp(value: Any) -> Any:
    return "<ms as a decimal string>" if isinstance(value, str) and value.isdigit() else value


def kafka_id(value: Any) -> Any:
    return "<22 chars of URL-safe base64>" if isinstance(value, str) and KAFKA_ID.match(value) else value


def broker_registration(c: Captured, broker_id: int) -> Any:
    raw = c.json(f"/brokers/ids/{broker_id}")
    port = c.ports[broker_id]
    out = dict(raw)
    out["timestamp"] = timestamp(raw.get("timestamp"))
    out["port"] = "<its port>" if raw.get("port") == port else raw.get("port")
    out["endpoints"] = [e.replace(f":{port}", ":<its port>") for e in raw.get("endpoints", [])]
    return out


def assignment(c: Captured, topic: str) -> dict[int, list[int]]:
    return {int(p): r for p, r in c.json(f"/brokers/topics/{topic}")["partitions"].items()}


def topic_znode(c: Captured, topic: str) -> Any:
    raw = dict(c.json(f"/brokers/topics/{topic}"))
    brokers = sorted(c.ports)
    raw["topic_id"] = kafka_id(raw.get("topic_id"))
    raw["partitions"] = {p: ("<a permutation of the brokers>" if sorted(r) == brokers else r)
                         for p, r in raw["partitions"].items()}
    return raw


def partition_state(c: Captured, topic: str, partition: int) -> Any:
    raw = dict(c.json(f"/brokers/topics/{topic}/partitions/{partition}/state"))
    replicas = assignment(c, topic)[partition]
    if raw.get("leader") == replicas[0]:
        raw["leader"] = "<the first replica>"
    if raw.get("isr") == replicas:
        raw["isr"] = "<the replicas, in assignment order>"
    return raw


def shape(c: Captured) -> dict[str, tuple[bool, int]]:
    """path -> (ephemeral, znode version): every znode, sequential names included."""
    return {p: (n.ephemeral, n.version) for p, n in c.nodes.items()}


# --- the comparisons ---------------------------------------------------------------------------

def test_the_same_znodes_exist(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert {p: n.ephemeral for p, n in mine.nodes.items()} == {p: n.ephemeral for p, n in ref.nodes.items()}


def test_container_znodes_hold_null_data(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    empty = {p for p, n in ref.nodes.items() if n.data is None}
    assert empty, "the reference has container znodes"
    assert {p: mine.nodes[p].data for p in sorted(empty) if p in mine.nodes} == {p: None for p in sorted(empty)}


def test_znode_versions_agree(both: tuple[Captured, Captured]) -> None:
    """zkVersions are fencing tokens (partition epoch, controller epoch): the same writes, the same versions."""
    mine, ref = both
    assert shape(mine) == shape(ref)


def test_broker_registrations(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert sorted(mine.ports) == sorted(ref.ports)
    for broker_id in sorted(ref.ports):
        raw, ref_raw = mine.json(f"/brokers/ids/{broker_id}"), ref.json(f"/brokers/ids/{broker_id}")
        assert h.type_shape(raw) == h.type_shape(ref_raw)  # key sets and value types
        assert broker_registration(mine, broker_id) == broker_registration(ref, broker_id)


def test_broker_registration_keys_and_types(both: tuple[Captured, Captured]) -> None:
    """The part of the registration a Kafka controller needs to decode it (features aside)."""
    mine, ref = both
    for broker_id in sorted(ref.ports):
        raw, ref_raw = mine.json(f"/brokers/ids/{broker_id}"), ref.json(f"/brokers/ids/{broker_id}")
        assert list(raw) == list(ref_raw)  # the same keys, in the order Kafka writes them
        without = {k: v for k, v in broker_registration(mine, broker_id).items() if k != "features"}
        assert without == {k: v for k, v in broker_registration(ref, broker_id).items() if k != "features"}


def json_key_orders(c: Captured) -> dict[str, list[str]]:
    """path -> the top-level keys of its JSON object, in written order."""
    found = {}
    for path, node in c.nodes.items():
        value = h.loads(node.data) if node.data and node.data[:1] == b"{" else None
        if isinstance(value, dict):
            found[path] = list(value)
    return found


def test_json_keys_in_kafkas_order(both: tuple[Captured, Captured]) -> None:
    """Key order does not matter to Kafka's readers; it is compared for the byte-for-byte goal. Znodes
    present on one side only are the other tests' business."""
    orders, ref_orders = json_key_orders(both[0]), json_key_orders(both[1])
    common = sorted(set(orders) & set(ref_orders))
    assert len(common) > 10
    assert {p: orders[p] for p in common} == {p: ref_orders[p] for p in common}


def test_topic_znode(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert h.type_shape(mine.json(f"/brokers/topics/{ALPHA}")) == h.type_shape(ref.json(f"/brokers/topics/{ALPHA}"))
    assert topic_znode(mine, ALPHA) == topic_znode(ref, ALPHA)


def test_partition_states(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    for p in range(5):
        assert partition_state(mine, ALPHA, p) == partition_state(ref, ALPHA, p), p


def test_controller_and_controller_epoch(both: tuple[Captured, Captured]) -> None:
    mine, ref = both

    def controller(c: Captured) -> Any:
        raw = dict(c.json("/controller"))
        raw["timestamp"] = timestamp(raw.get("timestamp"))
        raw["brokerid"] = "<a live broker>" if raw.get("brokerid") in c.ports else raw.get("brokerid")
        return raw
    assert controller(mine) == controller(ref)
    assert mine.nodes["/controller_epoch"].data == ref.nodes["/controller_epoch"].data  # a bare number


def test_cluster_id(both: tuple[Captured, Captured]) -> None:
    mine, ref = both

    def cluster_id(c: Captured) -> Any:
        raw = dict(c.json("/cluster/id"))
        raw["id"] = kafka_id(raw.get("id"))
        return raw
    assert cluster_id(mine) == cluster_id(ref)


def test_feature_znode(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert mine.json("/feature") == ref.json("/feature")


def test_topic_config_and_change_notifications(both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert mine.json(f"/config/topics/{ALPHA}") == ref.json(f"/config/topics/{ALPHA}")
    assert mine.nodes[f"/config/topics/{ALPHA}"].version == ref.nodes[f"/config/topics/{ALPHA}"].version

    def changes(c: Captured) -> dict[str, Any]:
        return {p: c.json(p) for p in c.nodes if p.startswith("/config/changes/")}
    assert changes(mine) == changes(ref)


def test_latest_producer_id_block_is_written_on_demand(cluster_target: ClusterTarget,
                                                       both: tuple[Captured, Captured]) -> None:
    mine, ref = both
    assert (mine.nodes["/latest_producer_id_block"].data, mine.nodes["/latest_producer_id_block"].version) == \
        (ref.nodes["/latest_producer_id_block"].data, ref.nodes["/latest_producer_id_block"].version)
    # The first idempotent producer makes one broker ask the controller for the first block.
    # (zk-alpha is compacted: records need keys)
    assert h.produce_one(cluster_target.bootstrap, ALPHA, 0, b"v", key=b"k") is None  # not idempotent
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster_target.bootstrap, "enable.idempotence": True,
                         "log_level": 0, "logger": h.silent_logger()})
    producer.produce(ALPHA, key=b"k", value=b"idempotent", partition=0)
    assert producer.flush(30) == 0
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        data, stat = zk.get("/latest_producer_id_block")
    finally:
        zk.stop()
    block = h.loads(data)
    assert block["broker"] in cluster_target.broker_ids
    assert (block["version"], block["block_start"], block["block_end"], stat.version) == (1, "0", "999", 1)
