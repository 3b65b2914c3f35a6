"""Scaling out: aggregate produce throughput of RF 1 topics on a 1-broker cluster against a 3-broker
cluster, for grete and for Apache Kafka 3.9.2 in ZooKeeper mode, side by side in one run
(docs/benchmarks.md, "Clusters").

Each round starts a cluster of ``n`` brokers, creates a topic of 6 partitions with replication
factor 1 (spread over the brokers by Kafka's placement), and runs ``--producers`` producer processes
at once, each sending ``--records`` records of ``--size`` bytes (acks=1, confluent-kafka)
round-robin over the partitions. The figure is the total bytes over the wall time of the slowest
producer.

    python -m benchmarks.bench_scaling [--rounds 2] [--records 40000] [--producers 3] [--targets grete,kafka-3.9]

This machine has 2 cores: the brokers and the producers share them, so three brokers cannot be
three times one here; the figure shows what spreading partitions costs or gains on one host, not
what three hosts would give. Writes benchmarks/results/scaling-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.cluster import cluster
from tools.reference_kafka_zk import kafka_zk_cluster

PARTITIONS = 6
OVERRIDES = {"zookeeper.session.timeout.ms": "6000", "offsets.topic.num.partitions": "3",
             "offsets.topic.replication.factor": "1", "transaction.state.log.num.partitions": "3",
             "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
             "auto.leader.rebalance.enable": "false"}
RESULTS = Path(__file__).parent / "results"


def start(target: str, brokers: int) -> AbstractContextManager[Any]:
    if target == "grete":
        return cluster(brokers, overrides=OVERRIDES)
    return kafka_zk_cluster(brokers, overrides=OVERRIDES)


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    """A topic of replication factor 1, returned once every partition has a leader."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = client.list_topics(name, timeout=10).topics[name].partitions
        if len(parts) == partitions and all(p.leader >= 0 for p in parts.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name}: partitions without a leader")


def produce(bootstrap: str, topic: str, records: int, size: int, offset: int) -> tuple[int, float]:
    """One producer process: (bytes acknowledged, seconds)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1",
                         "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, value=b"warm")
    producer.flush(30)
    failed: list[Any] = []
    value = b"x" * size
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=(i + offset) % PARTITIONS,
                                 on_delivery=lambda err, _msg: failed.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"produce failed: {failed[:3]}")
    return records * size, elapsed


def producers_mb_per_s(bootstrap: str, topic: str, producers: int, records: int, size: int) -> float:
    """``producers`` processes producing at once: total bytes over the slowest one's time."""
    create_topic(bootstrap, topic)
    with ProcessPoolExecutor(producers) as pool:
        done = list(pool.map(produce, [bootstrap] * producers, [topic] * producers,
                             [records] * producers, [size] * producers, range(producers)))
    return sum(b for b, _ in done) / max(s for _, s in done) / 1e6


def one_round(target: str, brokers: int, n: int, producers: int, records: int, size: int) -> dict[str, Any]:
    with start(target, brokers) as running:
        mb_per_s = producers_mb_per_s(running.bootstrap_servers, f"scale-{brokers}-{n}", producers, records, size)
    return {"target": target, "brokers": brokers, "round": n, "mb_per_s": mb_per_s}


def rounds(targets: list[str], count: int, producers: int, records: int, size: int) -> Iterator[dict[str, Any]]:
    for n in range(count):
        for brokers in (1, 3):
            for target in targets:  # alternated, so drifts of the machine hit all alike
                yield one_round(target, brokers, n, producers, records, size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--targets", default="grete,kafka-3.9")
    args = parser.parse_args()
    results = []
    for result in rounds(args.targets.split(","), args.rounds, args.producers, args.records, args.size):
        print(json.dumps(result), flush=True)
        results.append(result)
    summary: dict[str, dict[str, float]] = {}
    for target in args.targets.split(","):
        one = statistics.median(r["mb_per_s"] for r in results if r["target"] == target and r["brokers"] == 1)
        three = statistics.median(r["mb_per_s"] for r in results if r["target"] == target and r["brokers"] == 3)
        summary[target] = {"1_broker_mb_per_s": one, "3_brokers_mb_per_s": three, "3_over_1": three / one}
    print(json.dumps({"medians": summary}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results, "medians": summary}, indent=1))


if __name__ == "__main__":
    main()
