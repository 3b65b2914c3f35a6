"""Combined nodes (``process.roles=broker,controller``) in a quorum of three, as Kafka 4 runs small
clusters: grete's, Kafka 4.3.1's as the reference, and the two mixed in one quorum.

Each run: the three nodes elect a leader and register their brokers, a topic of replication factor 3
is written through every node (idempotent, acks=all), the node that is the quorum's leader (the
active controller and a broker leading partitions) is SIGKILLed, another voter takes over, the
partitions it led are led elsewhere and writes go on, the killed node restarts and rejoins the quorum
and every ISR, and a new consumer group reads everything written, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from tools.kraft_quorum import CombinedNode, Quorum, consume, produce, start_quorum, wait_for

pytestmark = pytest.mark.slow

TOPIC = "combined"
PARTITIONS = 6


# Snapshots at every commit, the log start moved past older ones after a second: the restarted node
# loads its own snapshot into its controller and its broker (docs/cluster.md "Snapshots").
SNAPSHOT_OFTEN = {"metadata.log.max.record.bytes.between.snapshots": "1", "metadata.max.retention.ms": "1000"}


@pytest.fixture
def quorum(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quorum]:
    kinds, extra = request.param if isinstance(request.param, tuple) else (request.param, {})
    started = start_quorum(kinds, tmp_path, lambda _kind: dict(extra), combined=True)
    try:
        yield started
    finally:
        started.stop()


def _nodes(quorum: Quorum) -> list[CombinedNode]:
    return [v for v in quorum.voters.values() if isinstance(v, CombinedNode)]


def _partitions(node: CombinedNode) -> dict[int, Any]:
    try:
        found = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(TOPIC, timeout=5).topics.get(TOPIC)
    except Exception:  # noqa: BLE001 - a node starting or gone
        return {}
    return dict(found.partitions) if found is not None and found.error is None else {}


def _listed_brokers(node: CombinedNode) -> set[int] | None:
    """The brokers ``node`` itself lists (a client library may ask another node once it knows them)."""
    try:
        answer = _wire.call("127.0.0.1", node.broker_port, MetadataRequest(topics=[]), MetadataResponse, 12, timeout=5)
    except OSError:  # not up yet
        return None
    return {b.node_id for b in answer.brokers}


def _fully_replicated(nodes: list[CombinedNode]) -> bool:
    for node in nodes:
        parts = _partitions(node)
        if len(parts) != PARTITIONS or any(p.leader < 0 or len(p.isrs) != 3 for p in parts.values()):
            return False
    return True


@pytest.mark.parametrize("quorum", [
    pytest.param(["grete", "grete", "grete"], id="grete"),
    pytest.param((["grete", "grete", "grete"], SNAPSHOT_OFTEN), id="grete-snapshots"),
    pytest.param(["grete", "kafka", "grete"], id="grete+kafka+grete", marks=pytest.mark.long),
    pytest.param(["kafka", "kafka", "kafka"], id="kafka", marks=pytest.mark.long),  # the reference
], indirect=True)
def test_combined_nodes_replicate_and_survive_the_active_controllers_death(quorum: Quorum) -> None:
    nodes = _nodes(quorum)
    ids = {n.node_id for n in nodes}
    quorum.leader_view()
    for node in nodes:
        wait_for(lambda n=node: _listed_brokers(n) == ids, 120, f"node {node.node_id} listing every broker")
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    wait_for(lambda: _fully_replicated(nodes), 60, "every partition led and fully in sync on every node")
    sent: list[bytes] = []
    for n, node in enumerate(nodes):
        sent += produce(node.bootstrap, TOPIC, n * 1000, 200)

    victim = quorum.voters[quorum.leader_view().leader_id]
    assert isinstance(victim, CombinedNode)
    others = [n for n in nodes if n is not victim]
    victim.kill()
    view = quorum.leader_view()
    assert view.leader_id != victim.node_id
    wait_for(lambda: (found := _partitions(others[0])) and all(p.leader != victim.node_id for p in found.values()),
             60, f"partitions led elsewhere than node {victim.node_id}")
    sent += produce(others[0].bootstrap, TOPIC, 5000, 300)

    victim.start()
    wait_for(lambda: _fully_replicated(nodes), 90, f"node {victim.node_id} back in every ISR")
    if victim.kind == "grete" and "metadata.max.retention.ms" in victim.extra:
        assert "starting from snapshot" in victim.log.read_text(errors="replace")
    quorum.caught_up(60, ids)
    sent += produce(victim.bootstrap, TOPIC, 7000, 100)
    got = consume(others[1].bootstrap, TOPIC, len(sent), group="check")
    assert sorted(got) == sorted(sent)
    for node in nodes:
        assert node.process is not None and node.process.poll() is None, node.log.read_text()[-3000:]
