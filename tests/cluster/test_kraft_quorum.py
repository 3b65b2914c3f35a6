"""A KRaft controller quorum of several voters, over the network: grete controllers alone, and grete
controllers in one quorum with Apache Kafka 4.3.1's (static voters, ``controller.quorum.voters``).

What is checked is what Kafka's own tools and peers see: the quorum's leader, epoch and high
watermark through DescribeQuorum, every voter caught up, a SIGKILLed leader replaced, a restarted
voter catching up, and in a mixed quorum the metadata log's batches equal, byte for byte, on every
voter whichever implementation led when they were written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tools.kraft_quorum import Quorum, metadata_batches, start_quorum

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
