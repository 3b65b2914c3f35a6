"""A flood of large Produce requests at one broker, to use up its ``queued.max.request.bytes``
(KIP-72): several producers (one connection each to the broker) send incompressible ~1-3 MB
requests to a topic of their own led by that broker, as fast as it takes them (acks=1, 5 in flight
each). While the pool is used up the broker stops reading every connection, those of the round's
writers and of its followers too, so they slow down; none of them may fail for good, and nothing
acknowledged may be lost.

A probe times a Metadata request on a fresh connection to the broker before and during the flood:
a pool in use shows as a slower answer (or none within the probe's timeout).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Producer

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from grete.testing import _wire

VALUE_BYTES = 256 * 1024
PRODUCERS = 8
REQUEST_BYTES = 3_000_000  # librdkafka's message.max.bytes bounds a whole Produce request
PROBE_TIMEOUT_S = 10.0


@dataclass
class Flood:
    sent_bytes: int = 0
    acked: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, error: object, message: object) -> None:
        with self.lock:
            if error is None:
                self.acked += 1
            else:
                self.errors[str(error)] = self.errors.get(str(error), 0) + 1


def create_topic(controller: tuple[str, int], name: str, broker: int, partitions: int = 3) -> None:
    """``name`` with every partition on ``broker`` alone, by CreateTopics to the controller (the
    installed confluent-kafka refuses a replica assignment: "Specifying a default partition count
    and a replica assignment are mutually exclusive", whatever the counts)."""
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=-1, replication_factor=-1, configs=[],
        assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=[broker])
                     for p in range(partitions)])
    answer = _wire.call(*controller, CreateTopicsRequest(topics=[topic], timeout_ms=30_000), CreateTopicsResponse,
                        _wire.CREATE_TOPICS_VERSION, timeout=60)
    for result in answer.topics:
        if result.error_code != 0:
            raise RuntimeError(f"creating {name}: {ErrorCode(result.error_code).name} {result.error_message or ''}")


def probe(host: str, port: int) -> str:
    """The time a Metadata request takes on a new connection, or why it got no answer."""
    started = time.monotonic()
    try:
        _wire.call(host, port, MetadataRequest(topics=[]), MetadataResponse, 9, timeout=PROBE_TIMEOUT_S)
    except OSError as exc:
        return f"no answer after {time.monotonic() - started:.1f}s ({exc!r})"
    return f"{(time.monotonic() - started) * 1000:.0f} ms"


def _produce(bootstrap: str, topic: str, until: float, flood: Flood) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                         "compression.type": "none", "linger.ms": 20, "batch.size": 1_000_000,
                         "message.max.bytes": REQUEST_BYTES, "max.in.flight.requests.per.connection": 5,
                         "queue.buffering.max.kbytes": 32 * 1024, "message.timeout.ms": 30_000})
    value = os.urandom(VALUE_BYTES)
    while time.monotonic() < until:
        try:
            producer.produce(topic, value, on_delivery=flood.delivered)
            with flood.lock:
                flood.sent_bytes += VALUE_BYTES
        except BufferError:  # its queue is full: the broker is not taking requests as fast
            producer.poll(0.05)
        producer.poll(0)
    producer.purge(in_queue=True, in_flight=False)  # the flood ends now: only requests in flight go on
    producer.flush(15)


def run(bootstrap: str, topic: str, seconds: float, probe_at: tuple[str, int]) -> tuple[Flood, list[str]]:
    """Flood ``topic`` for ``seconds``; returns the counts and the probe's answers."""
    flood = Flood()
    probes = [f"probe before: {probe(*probe_at)}"]
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_produce, args=(bootstrap, topic, until, flood), daemon=True,
                                name=f"flood-{i}") for i in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    time.sleep(min(2.0, seconds / 2))  # the producers connected and their queues full
    probes.append(f"probe during: {probe(*probe_at)}")
    for thread in threads:
        thread.join(seconds + 60)
    return flood, probes
