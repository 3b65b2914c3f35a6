"""A KRaft controller quorum of several voters, over the network: grete controllers alone, and grete
controllers in one quorum with Apache Kafka 4.3.1's (static voters, ``controller.quorum.voters``).

What is checked is what Kafka's own tools and peers see: the quorum's leader, epoch and high
watermark through DescribeQuorum, every voter caught up, a SIGKILLed leader replaced, a restarted
voter catching up, and in a mixed quorum the metadata log's batches equal, byte for byte, on every
voter whichever implementation led when they were written.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from tools.kraft_quorum import (
    KafkaBroker,
    Quorum,
    consume,
    metadata_batches,
    produce,
    start_kafka_broker,
    start_quorum,
    wait_for,
)

pytestmark = pytest.mark.slow

# In a mixed quorum the implementation with one voter should win the election after a leader of the
# other is killed. The survivor of the other kind notices first (shorter fetch timeout), but its
# pre-vote is refused by this one, which still counts the dead leader as alive (KIP-996); when this
# one's own fetch timeout ends, its pre-vote and vote are granted at once. Both directions then come
# in two rounds; the rounds go on if chance decides otherwise.
TIMEOUTS_MS = {"once": {"controller.quorum.fetch.timeout.ms": "3000", "controller.quorum.election.timeout.ms": "300"},
               "twice": {"controller.quorum.fetch.timeout.ms": "1000",
                         "controller.quorum.election.timeout.ms": "1500"}}


@pytest.fixture
def quorums(tmp_path: Path) -> Iterator[Callable[[list[str]], Quorum]]:
    started: list[Quorum] = []

    def start(kinds: list[str]) -> Quorum:
        quorum: Quorum = start_quorum(kinds, tmp_path / f"quorum{len(started)}",
                                      lambda kind: TIMEOUTS_MS["once" if kinds.count(kind) == 1 else "twice"])
        started.append(quorum)
        return quorum
    yield start
    for quorum in started:
        quorum.stop()


def test_three_grete_controllers_elect_replicate_and_fail_over(quorums: Callable[[list[str]], Quorum]) -> None:
    quorum = quorums(["grete", "grete", "grete"])
    view = quorum.caught_up()
    # The first leader wrote the format step's bootstrap records (a metadata transaction) after its
    # LeaderChangeMessage: more than the one control record is committed.
    assert view.high_watermark > 1
    # Static voters have no directory id, the leader included: reported as zero, as Kafka's leader does.
    assert {v.replica_directory_id for v in view.current_voters} == {uuid.UUID(int=0)}
    first_leader, first_epoch = view.leader_id, view.leader_epoch
    quorum.voters[first_leader].kill()
    started = time.monotonic()
    after = quorum.leader_view(timeout=30)
    failover = time.monotonic() - started
    assert after.leader_id != first_leader and after.leader_epoch > first_epoch
    quorum.voters[first_leader].start()
    view = quorum.caught_up()
    logs = {v.node_id: metadata_batches(v, view.high_watermark) for v in quorum.voters.values()}
    assert logs[1] == logs[2] == logs[3], "the voters' metadata logs differ below the high watermark"
    print(f"leader {first_leader} killed: leader {after.leader_id} in epoch {after.leader_epoch} after {failover:.2f} s")


@pytest.mark.long  # two to four minutes of Kafka controllers: by hand (-m long), as docs/cluster.md says
@pytest.mark.parametrize("kinds", [["kafka", "kafka", "grete"], ["kafka", "grete", "grete"]],
                         ids=["two-kafka-one-grete", "one-kafka-two-grete"])
def test_a_quorum_mixing_grete_and_kafka_controllers(quorums: Callable[[list[str]], Quorum],
                                                     kinds: list[str]) -> None:
    """Elections and replication across implementations: whoever leads, the others follow it to its
    high watermark; leaders are killed until each implementation has led with the other following."""
    quorum = quorums(kinds)
    led_by: set[str] = set()
    for _round in range(10):
        view = quorum.caught_up(timeout=120)
        leader = quorum.voters[view.leader_id]
        led_by.add(leader.kind)
        print(f"epoch {view.leader_epoch}: {leader.kind} voter {leader.node_id} leads, high watermark "
              f"{view.high_watermark}, every voter caught up")
        logs = [metadata_batches(v, view.high_watermark) for v in quorum.voters.values()]
        assert all(log == logs[0] for log in logs), f"metadata logs differ below {view.high_watermark}"
        if led_by == {"grete", "kafka"}:
            break
        # Make the other implementation lead: kill this leader; bring it back once another leads.
        leader.kill()
        quorum.leader_view(timeout=60)
        leader.start()
    assert led_by == {"grete", "kafka"}, f"only {led_by} led in ten rounds"
    for voter in quorum.live():
        assert voter.process is not None and voter.process.poll() is None, voter.log.read_text()[-3000:]


@pytest.mark.long  # by hand (-m long): test_kraft_controller_admin.py runs a Kafka broker under a grete controller by default
def test_kafka_brokers_under_a_grete_controller_quorum(quorums: Callable[[list[str]], Quorum], tmp_path: Path) -> None:
    """Apache Kafka 4.3.1 brokers (process.roles=broker) register with three grete controllers, are
    unfenced, host a topic created through them (CreateTopics forwarded in an Envelope, placed by the
    grete leader), take writes and serve them back; the grete leader is SIGKILLed and the brokers
    carry on with the next one, which knows them from the log; then a broker is SIGKILLed, and the
    controller fences it and moves its leaderships to the other."""
    quorum = quorums(["grete", "grete", "grete"])
    quorum.caught_up()
    brokers: list[KafkaBroker] = []
    try:
        brokers = [start_kafka_broker(quorum, node_id, tmp_path / f"broker{node_id}") for node_id in (4, 5)]
        wait_for(lambda: all(b.started() for b in brokers), 120, "the Kafka brokers unfenced and started")
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("under-grete", 2, 2)])["under-grete"].result(30)
        # The brokers learn of the topic from the metadata log, a moment after the controller
        # committed it (as under Kafka's controllers).
        described = wait_for(lambda: _described(admin, "under-grete"), 30, "the topic on the brokers")
        assert sorted(len(p.replicas) for p in described.partitions) == [2, 2]
        sent = produce(bootstrap, "under-grete", 0, 200)
        view = quorum.leader_view()
        quorum.voters[view.leader_id].kill()
        quorum.leader_view(timeout=30)
        sent += produce(bootstrap, "under-grete", 200, 200)
        # A broker dies: its session expires, the controller fences it and gives its partitions the
        # other ISR member as leader; nothing acknowledged is lost.
        brokers[0].kill()
        survivor = brokers[1].bootstrap
        sent += produce(survivor, "under-grete", 400, 200)
        assert sorted(consume(survivor, "under-grete", len(sent))) == sorted(sent)
        survivor_process = brokers[1].process
        assert survivor_process is not None and survivor_process.poll() is None, brokers[1].log.read_text()[-3000:]
    finally:
        for broker in brokers:
            broker.kill()


def _described(admin: AdminClient, topic: str) -> Any:
    try:
        return admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    except KafkaException:
        return None
