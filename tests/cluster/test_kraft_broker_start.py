"""A KRaft broker's start, as Kafka 4.3's BrokerServer starts: its listeners are bound before it
registers (the registration names their ports), but it answers no request until the controller has
registered it, it has replayed the metadata log up to that registration and the controller has
unfenced it, so no client is told of a cluster without the topics it had or without this broker; and a broker that cannot register within
``initial.broker.registration.timeout.ms`` gives up and exits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing._wire import Wire
from grete.testing.cluster import cluster
from grete.testing.process import BrokerStartError

pytestmark = pytest.mark.slow

TOPICS = 300


def _answers_until_listed(host: str, port: int, broker_id: int, until: float) -> list[MetadataResponse]:
    """Every Metadata answer (all topics) the port gives, asked as fast as it accepts, until one
    lists ``broker_id`` itself."""
    answers: list[MetadataResponse] = []
    while time.monotonic() < until:
        try:
            wire = Wire(host, port, timeout=5)
        except OSError:
            time.sleep(0.002)
            continue
        try:
            answer: MetadataResponse = wire.call(MetadataRequest(topics=None), MetadataResponse, 9)
        except OSError:
            continue
        finally:
            wire.close()
        answers.append(answer)
        if any(b.node_id == broker_id for b in answer.brokers):
            break
    return answers


def test_a_restarted_broker_answers_only_once_it_has_caught_up(tmp_path: Path) -> None:
    """Restarted while the controller is paused, the broker cannot catch up: it answers nothing
    until it has and is unfenced (before, it answered from an empty image: no topics, no brokers)."""
    with cluster(3, directory=tmp_path / "c", controllers=1) as nodes:
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap_servers})
        names = [f"t{i}" for i in range(TOPICS)]
        for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
            future.result(60)
        broker = nodes.brokers[3]
        host, port = broker.host, broker.port
        nodes.kill_broker(3)
        assert nodes.quorum is not None
        controller = next(iter(nodes.quorum.controllers))
        nodes.quorum.pause(controller)
        starting = threading.Thread(target=lambda: nodes.start_broker(3, wait_metadata=False))
        try:
            starting.start()
            paused = _answers_until_listed(host, port, 3, time.monotonic() + 3)
        finally:
            nodes.quorum.resume(controller)
        answers = paused + _answers_until_listed(host, port, 3, time.monotonic() + 60)
        starting.join(60)
        assert answers, "the restarted broker never answered"
        unlisted = [a for a in answers if all(b.node_id != 3 for b in a.brokers)]
        assert not unlisted, f"{len(unlisted)} of its {len(answers)} answers did not list the broker itself"
        counts = [len({t.name for t in a.topics} & set(names)) for a in answers]
        short = [n for n in counts if n < TOPICS]
        assert not short, f"{len(short)} of its {len(counts)} answers lacked topics (listing {sorted(set(short))} of {TOPICS})"


def test_a_broker_that_cannot_register_exits(tmp_path: Path) -> None:
    with cluster(3, directory=tmp_path / "c", controllers=1,
                 broker_overrides={3: {"initial.broker.registration.timeout.ms": "3000"}}) as nodes:
        process = nodes.brokers[3].process
        nodes.kill_broker(3)
        assert nodes.quorum is not None
        controller = next(iter(nodes.quorum.controllers))
        nodes.quorum.pause(controller)
        try:
            with pytest.raises(BrokerStartError) as failed:
                nodes.start_broker(3, timeout=30, wait_metadata=False)
        finally:
            nodes.quorum.resume(controller)
        assert "unable to register with the controller quorum" in str(failed.value)
        assert nodes.brokers[3].process is process  # the failed start left no running broker behind
