"""Brokers of a KRaft cluster (``process.roles=broker``): grete brokers under a grete or an Apache Kafka
4.3.1 controller, alone or with a Kafka 4.3.1 broker in the same replica sets, and the same run on an
all-Kafka cluster as the reference.

Each run: the brokers register and are unfenced, a topic of replication factor 3 is created through
them and written through each of them (idempotent, acks=all), the broker leading a partition is
SIGKILLed, writes go on through another once the controller has fenced it and moved its leaderships,
the killed broker restarts and rejoins every ISR, and a new consumer group reads everything written,
once. On grete brokers, the metadata log they followed is the controller's, byte for byte.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tools import kafka_dist
from tools.kraft_quorum import (
    KAFKA,
    GreteBroker,
    KafkaBroker,
    Quorum,
    consume,
    metadata_batches,
    metadata_log_batches,
    produce,
    start_grete_broker,
    start_kafka_broker,
    start_quorum,
    wait_for,
)

pytestmark = pytest.mark.slow

TOPIC = "replicated"
PARTITIONS = 6
# broker.session.timeout.ms: a Kafka controller fences a killed broker after this; a grete controller
# sees the process gone (its connection reset, its port refusing) and fences it at once, so its
# timeout is set long enough that a failover within it cannot be the timeout's work.
SESSION_MS = {"kafka": "4000", "grete": "30000"}


def _cluster(started: list[Any], tmp_path: Path, controller: str,
             kinds: list[str]) -> tuple[Quorum, list[GreteBroker | KafkaBroker]]:
    quorum = start_quorum([controller], tmp_path / "quorum",
                          lambda kind: {"broker.session.timeout.ms": SESSION_MS[kind]})
    started.append(quorum)
    quorum.leader_view()
    brokers: list[GreteBroker | KafkaBroker] = []
    for offset, kind in enumerate(kinds):
        start = start_grete_broker if kind == "grete" else start_kafka_broker
        brokers.append(start(quorum, 10 + offset, tmp_path / f"broker{10 + offset}"))
        started.append(brokers[-1])
    ids = {b.node_id for b in brokers}
    for broker in brokers:
        wait_for(lambda b=broker: _listed_brokers(b) == ids, 120, f"broker {broker.node_id} listing every broker")
    return quorum, brokers


def _create_topic(broker: GreteBroker | KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)


def _listed_brokers(broker: GreteBroker | KafkaBroker) -> set[int] | None:
    try:
        return set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001 - not up yet
        return None


def _partitions(broker: GreteBroker | KafkaBroker) -> dict[int, Any]:
    try:
        found = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(TOPIC, timeout=5).topics.get(TOPIC)
    except Exception:  # noqa: BLE001 - a broker starting or gone
        return {}
    return dict(found.partitions) if found is not None and found.error is None else {}


def _fully_replicated(brokers: list[GreteBroker | KafkaBroker]) -> bool:
    """Every broker's metadata shows every partition led, with all three replicas in sync."""
    for broker in brokers:
        parts = _partitions(broker)
        if len(parts) != PARTITIONS or any(p.leader < 0 or len(p.isrs) != 3 for p in parts.values()):
            return False
    return True


@pytest.mark.parametrize(("controller", "kinds"), [
    ("grete", ["grete", "grete", "grete"]),
    pytest.param("kafka", ["grete", "grete", "grete"], marks=pytest.mark.long),
    pytest.param("kafka", ["grete", "grete", "kafka"], marks=pytest.mark.long),
    pytest.param("grete", ["grete", "kafka", "grete"], marks=pytest.mark.long),
    pytest.param("kafka", ["kafka", "kafka", "kafka"], marks=pytest.mark.long),  # the reference
], ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_brokers_replicate_and_fail_over(started: list[Any], tmp_path: Path, controller: str,
                                         kinds: list[str]) -> None:
    quorum, brokers = _cluster(started, tmp_path, controller, kinds)
    _create_topic(brokers[0])
    wait_for(lambda: _fully_replicated(brokers), 60, "every partition led and fully in sync on every broker")
    # kafka-metadata-quorum through a broker: it forwards DescribeQuorum to the active controller.
    described = kafka_dist.run_tool(KAFKA, "kafka-metadata-quorum", "--bootstrap-server", brokers[0].bootstrap,
                                    "describe", "--status")
    assert described.returncode == 0, described.stderr
    assert f"LeaderId:               {quorum.leader_view().leader_id}" in described.stdout, described.stdout
    sent: list[bytes] = []
    for n, broker in enumerate(brokers):
        sent += produce(broker.bootstrap, TOPIC, n * 1000, 200)

    # The leader of partition 0 dies; its partitions get leaders among the others once the
    # controller has fenced it (broker.session.timeout.ms), and writes go on.
    victim_id = _partitions(brokers[1])[0].leader
    victim = next(b for b in brokers if b.node_id == victim_id)
    others = [b for b in brokers if b is not victim]
    killed_at = time.monotonic()
    victim.kill()
    wait_for(lambda: all(p.leader != victim_id for p in _partitions(others[0]).values()) or None, 60,
             f"partitions led elsewhere than broker {victim_id}")
    if controller == "grete":
        assert time.monotonic() - killed_at < 10, "a dead broker's leaderships waited for its session timeout"
    sent += produce(others[0].bootstrap, TOPIC, 5000, 300)

    victim.start()
    wait_for(lambda: _fully_replicated(brokers), 90, f"broker {victim_id} back in every ISR")
    # A leader proposes its grown ISR in ascending order, as Kafka 4's leader (from a hash set).
    assert all(list(p.isrs) == sorted(p.isrs) for p in _partitions(others[0]).values()), _partitions(others[0])
    sent += produce(victim.bootstrap, TOPIC, 7000, 100)
    got = consume(others[1].bootstrap, TOPIC, len(sent), group="check")
    assert sorted(got) == sorted(sent)

    # A grete broker's copy of the metadata log is the controller's, as the controller wrote it.
    view = quorum.leader_view()
    leader = quorum.voters[view.leader_id]
    for broker in brokers:
        if isinstance(broker, GreteBroker):
            followed = metadata_log_batches(broker.data, view.high_watermark)
            assert followed and followed == metadata_batches(leader, view.high_watermark)[:len(followed)]
    for broker in brokers:
        assert broker.process is not None and broker.process.poll() is None, broker.log.read_text()[-3000:]


def test_a_broker_stopped_cleanly_hands_its_leaderships_over_first(started: list[Any], tmp_path: Path) -> None:
    """SIGTERM: the broker asks the controller to shut down (controlled shutdown) and keeps serving
    until its leaderships have moved, so no write waits for its session to expire."""
    _quorum, brokers = _cluster(started, tmp_path, "grete", ["grete", "grete", "grete"])
    _create_topic(brokers[0])
    wait_for(lambda: _fully_replicated(brokers), 60, "every partition fully in sync")
    leader_id = _partitions(brokers[1])[0].leader
    stopping = next(b for b in brokers if b.node_id == leader_id)
    assert stopping.process is not None
    began = time.monotonic()
    stopping.process.terminate()
    assert stopping.process.wait(60) == 0
    took = time.monotonic() - began
    survivor = next(b for b in brokers if b is not stopping)
    assert all(p.leader not in (leader_id, -1) for p in _partitions(survivor).values())
    text = stopping.log.read_text()
    assert "controlled shutdown of broker" in text and "succeeded" in text, text[-3000:]
    assert took < 10


def test_a_paused_broker_waits_for_its_session_timeout(started: list[Any], tmp_path: Path) -> None:
    """A broker that is silent but whose process lives (SIGSTOP) leaves no evidence of death: the
    controller waits for broker.session.timeout.ms before fencing it, and unfences it once it
    heartbeats again."""
    quorum = start_quorum(["grete"], tmp_path / "quorum", lambda _kind: {"broker.session.timeout.ms": "6000"})
    started.append(quorum)
    quorum.leader_view()
    brokers = [start_grete_broker(quorum, 10 + n, tmp_path / f"broker{10 + n}") for n in range(2)]
    started.extend(brokers)
    for broker in brokers:
        wait_for(lambda b=broker: _listed_brokers(b) == {10, 11}, 120, "both brokers listed")
    paused = brokers[0]
    assert paused.process is not None
    paused.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3)  # what is asserted is that nothing happens within this time
        assert _listed_brokers(brokers[1]) == {10, 11}, "a paused broker was fenced before its session timed out"
        wait_for(lambda: _listed_brokers(brokers[1]) == {11}, 20, "the paused broker fenced after its session")
    finally:
        paused.process.send_signal(signal.SIGCONT)
    wait_for(lambda: _listed_brokers(brokers[1]) == {10, 11}, 30, "the resumed broker unfenced again")


@pytest.mark.parametrize("controller", ["grete", pytest.param("kafka", marks=pytest.mark.long)])
def test_feature_levels_through_a_broker(started: list[Any], tmp_path: Path, controller: str) -> None:
    """kafka-features through a grete broker: the finalized levels read from its image, and a
    downgrade sent on to the controller (UpdateFeatures), seen in the image after; an upgrade made
    at the controller directly, seen by the broker too."""
    quorum = start_quorum([controller], tmp_path / "quorum")
    started.append(quorum)
    quorum.leader_view()
    broker = start_grete_broker(quorum, 10, tmp_path / "broker10")
    started.append(broker)
    wait_for(lambda: _listed_brokers(broker) == {10}, 120, "the broker listed")

    def streams_level() -> str:
        described = kafka_dist.run_tool(KAFKA, "kafka-features", "--bootstrap-server", broker.bootstrap, "describe")
        assert described.returncode == 0, described.stderr
        line = next(line for line in described.stdout.splitlines() if "streams.version" in line)
        return line.split("FinalizedVersionLevel:")[1].split()[0]
    assert streams_level() == "1"
    downgraded = kafka_dist.run_tool(KAFKA, "kafka-features", "--bootstrap-server", broker.bootstrap, "downgrade",
                                     "--feature", "streams.version=0")
    assert downgraded.returncode == 0 and "streams.version was downgraded to 0." in downgraded.stdout, downgraded
    assert streams_level() == "0"
    # Checked by the controller the broker forwards to, which names itself.
    refused = kafka_dist.run_tool(KAFKA, "kafka-features", "--bootstrap-server", broker.bootstrap, "upgrade",
                                  "--feature", "no.such.feature=1")
    leader = quorum.leader_view().leader_id
    assert f"Local controller {leader} does not support this feature." in refused.stdout + refused.stderr, refused
    # Set at the controller itself: the broker's answers follow its image, not what it last set.
    controller_at = f"127.0.0.1:{quorum.voters[quorum.leader_view().leader_id].port}"
    upgraded = kafka_dist.run_tool(KAFKA, "kafka-features", "--bootstrap-controller", controller_at, "upgrade",
                                   "--feature", "streams.version=1")
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    wait_for(lambda: streams_level() == "1", 30, "the broker answering the controller's level")
