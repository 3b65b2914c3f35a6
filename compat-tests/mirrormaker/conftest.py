"""Fixtures of compat-tests/mirrormaker: two independent brokers of the session's target (a grete node,
a 3-broker grete KRaft cluster with ``--target=grete-kraft``, or Kafka with ``--target=kafka-4`` /
``kafka-3.9``) named ``src`` and ``dst``, and one MirrorMaker 2
(Kafka 4.3.1, dedicated mode) replicating ``src`` -> ``dst`` for the whole test file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from mirror_maker import (
    GROUP,
    MM2_VERSION,
    PARTITIONS,
    PER_PARTITION,
    RETENTION_MS,
    Mirror,
    MirrorMaker,
    Node,
    commit,
    end_offsets,
    mm2_properties,
)

from grete.testing.cluster import cluster
from grete.testing.process import broker_process
from tools import kafka_dist
from tools.kafka_admin import create_topic
from tools.reference_kafka import ReferenceKafka, free_port


@contextmanager
def single_node(target: str) -> Iterator[Node]:
    if target == "grete":
        url = f"http://127.0.0.1:{free_port()}"
        with broker_process({"metrics.listener": url}) as grete:
            yield Node(grete.bootstrap_servers, grete.pid, f"{url}/metrics")
        return
    if target == "grete-kraft":  # a 3-broker KRaft cluster; its first broker is the one measured
        url = f"http://127.0.0.1:{free_port()}"
        with cluster(3, controllers=1, broker_overrides={1: {"metrics.listener": url}}) as running:
            yield Node(running.bootstrap_servers, running.brokers[1].process.pid, f"{url}/metrics")
        return
    with ReferenceKafka(target.removeprefix("kafka-")) as kafka:
        assert kafka.proc is not None
        yield Node(kafka.bootstrap, kafka.proc.pid, None)


def produce_orders(bootstrap: str, first: int, count: int) -> None:
    """``count`` records to each partition of ``orders``: keys repeat (k0..k6), one header each."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    failures: list[object] = []
    for i in range(first, first + count):
        for p in range(PARTITIONS):
            producer.produce("orders", key=f"k{i % 7}".encode(), value=f"order-{p}-{i:04d}".encode(),
                             headers=[("source", f"p{p}".encode()), ("seq", str(i).encode())], partition=p,
                             on_delivery=lambda err, _m: failures.append(err) if err else None)
    assert producer.flush(30) == 0 and not failures, failures


# Which clusters MirrorMaker joins, against a grete target: both the target's, or Apache Kafka 4.3.1 on
# one side (a single node) and the target on the other. Against a Kafka target: Kafka on both sides.
DIRECTIONS = ["same", "kafka-to-target", "target-to-kafka"]


@pytest.fixture(scope="module", params=DIRECTIONS)
def mirror(request: pytest.FixtureRequest, target: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    """``orders`` (3 partitions, ``retention.ms`` set) on src with half its records, MirrorMaker
    started, the other half produced, and every record on dst's ``src.orders``; the group ``GROUP``
    committed on src at the partitions' ends."""
    direction = request.param
    if direction != "same" and not target.startswith("grete"):
        pytest.skip("Kafka to Kafka is the reference: the mixed directions run against grete")
    src_kind = "kafka-4" if direction == "kafka-to-target" else target
    dst_kind = "kafka-4" if direction == "target-to-kafka" else target
    try:
        dist = kafka_dist.layout(MM2_VERSION, tmp_path_factory.mktemp("kafka-dist"))
    except (RuntimeError, OSError) as exc:  # no mvn / no network
        pytest.skip(f"Kafka {MM2_VERSION} with MirrorMaker unavailable: {exc}")
    with ExitStack() as stack:
        src = stack.enter_context(single_node(src_kind))
        dst = stack.enter_context(single_node(dst_kind))
        create_topic(src.bootstrap, "orders", PARTITIONS, {"retention.ms": RETENTION_MS})
        produce_orders(src.bootstrap, 0, PER_PARTITION // 2)
        mm2 = MirrorMaker(dist, mm2_properties(src.bootstrap, dst.bootstrap), tmp_path_factory.mktemp("mm2"))
        mm2.start()
        stack.callback(mm2.stop)
        mm2.await_(lambda: sum(end_offsets(dst.bootstrap, "src.orders", PARTITIONS)) > 0,
                   "the first records on dst's src.orders")
        produce_orders(src.bootstrap, PER_PARTITION // 2, PER_PARTITION // 2)
        mm2.await_(lambda: end_offsets(dst.bootstrap, "src.orders", PARTITIONS) == [PER_PARTITION] * PARTITIONS,
                   f"{PER_PARTITION} records in each partition of dst's src.orders")
        commit(src.bootstrap, GROUP, "orders", [PER_PARTITION] * PARTITIONS)
        yield Mirror(src, dst, mm2)
