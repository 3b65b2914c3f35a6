"""Eligible leader replicas (KIP-966) on a KRaft cluster, as a user meets them: a partition of
replication factor 3 with ``min.insync.replicas=2`` loses its replicas one by one (each stopped
cleanly), then one that left the ISR while it was below its minimum comes back alone and leads
again; once the others follow it, everything acknowledged is read back; DescribeTopicPartitions shows the ELR and the last known
leader at each step. Three grete brokers under a grete controller; the same with Apache Kafka 4.3.1's
controller (``-m long``): its answers are the reference."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from tools.kafka_admin import call
from tools.kraft_quorum import GreteBroker, produce, start_grete_broker, start_quorum, wait_for

pytestmark = pytest.mark.slow
TOPIC = "elr"


def _state(broker: GreteBroker) -> tuple[int, list[int], list[int], list[int]] | None:
    """(leader, ISR, ELR, last known ELR) of partition 0, from DescribeTopicPartitions."""
    request = DescribeTopicPartitionsRequest(topics=[DescribeTopicPartitionsRequest.TopicRequest(name=TOPIC)],
                                             response_partition_limit=10)
    try:
        response = call(broker.bootstrap, request, 0)
    except (OSError, TimeoutError):
        return None
    assert isinstance(response, DescribeTopicPartitionsResponse)
    parts = response.topics[0].partitions if response.topics else []
    if not parts:
        return None
    p = parts[0]
    return p.leader_id, sorted(p.isr_nodes), sorted(p.eligible_leader_replicas or []), \
        sorted(p.last_known_elr or [])


def _stop(broker: GreteBroker) -> None:
    """SIGTERM: a controlled shutdown, and the clean-shutdown files naming the broker's epoch."""
    assert broker.process is not None
    broker.process.terminate()
    assert broker.process.wait(60) == 0, broker.log.read_text()[-3000:]
    broker.process = None


def _read(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.consume(100, 1.0):
            if message.error() is None and message.value() is not None:
                got.append(message.value())
    consumer.close()
    return got


@pytest.mark.parametrize("controller", ["grete", pytest.param("kafka", marks=pytest.mark.long)])
def test_a_partition_whose_isr_emptied_is_led_again_from_its_elr(started: list[Any], tmp_path: Path,
                                                                  controller: str) -> None:
    quorum = start_quorum([controller], tmp_path / "quorum")
    started.append(quorum)
    quorum.leader_view()
    brokers = {n: start_grete_broker(quorum, n, tmp_path / f"broker{n}", {"offsets.topic.replication.factor": "1"})
               for n in (10, 11, 12)}
    started.extend(brokers.values())
    first = brokers[10]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == 3 or None, 120, "three brokers registered")
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    state = wait_for(lambda: (s := _state(first)) is not None and len(s[1]) == 3 and s, 60, "the ISR whole")
    leader = state[0]
    sent = produce(first.bootstrap, TOPIC, 0, 100)
    f1, f2 = (n for n in sorted(brokers) if n != leader)

    # Down to the minimum: nothing eligible beyond the ISR.
    _stop(brokers[f1])
    assert wait_for(lambda: _state(brokers[leader]) == (leader, sorted([leader, f2]), [], []) or None, 60,
                    f"{f1} out of the ISR")
    # Below it: the replica that leaves is an eligible leader (the high watermark stops with it).
    _stop(brokers[f2])
    assert wait_for(lambda: _state(brokers[leader]) == (leader, [leader], [f2], []) or None, 60,
                    f"{f2} in the ELR")
    # The last ISR member stops: nobody can lead. The one that left last comes back, alone.
    _stop(brokers[leader])
    brokers[f2].start()
    back = wait_for(lambda: (s := _state(brokers[f2])) is not None and s[0] == f2 and s, 120,
                    f"{f2} leading from the ELR")
    assert back == (f2, [f2], [leader], []), back

    # The others return and follow it: the ISR at its minimum again clears the ELR. (Alone, below
    # the minimum, the new leader's high watermark stays where it last heard it, as Kafka's does.)
    for n in (leader, f1):
        brokers[n].start()
    assert wait_for(lambda: (s := _state(brokers[f2])) is not None and len(s[1]) == 3 and s, 120,
                    "the ISR whole again") == (f2, sorted(brokers), [], [])
    # Everything acknowledged is there: the others truncated to the ELR leader's log, which held it.
    assert sorted(_read(brokers[f2].bootstrap, len(sent))) == sorted(sent)
