"""An idle 3-broker cluster: what it costs to hold partitions and idle consumers (docs/benchmarks.md,
"Idle cluster").

A cluster of 3 brokers, ``--partitions`` partitions of replication factor 3, and ``--consumers`` idle
librdkafka consumers (``fetch.wait.max.ms`` 500, each assigned every partition, nothing produced). Over
``--seconds`` it reports each broker's CPU (user + system time of its process, in % of one core) and
the consumers' Fetch requests per second per broker, from librdkafka's own statistics
(``--consumers 0``: what the brokers and their replication cost alone). An idle consumer
on Kafka sends one Fetch per ``fetch.wait.max.ms`` to each broker it reads from: 2 a second.

    python -m benchmarks.bench_idle_cluster [--partitions 100] [--consumers 10] [--seconds 60]
                                            [--targets grete,kafka-3.9,grete-kraft]

``grete`` is a ZooKeeper cluster, ``grete-kraft`` a KRaft one (3 grete controllers, whose CPU is
reported too, beside the brokers').

Prints one JSON line per target; writes benchmarks/results/idle-cluster.json.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.cluster import cluster
from tools.reference_kafka_zk import kafka_zk_cluster

OVERRIDES = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
             "auto.leader.rebalance.enable": "false"}
RESULTS = Path(__file__).parent / "results"
FETCH_WAIT_MS = 500
STATS_MS = 1000


def start(target: str) -> AbstractContextManager[Any]:
    if target == "grete":
        return cluster(3, overrides=OVERRIDES)
    if target == "grete-kraft":
        return cluster(3, overrides=OVERRIDES, controllers=3)
    return kafka_zk_cluster(3, overrides=OVERRIDES)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and of its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, partitions, 3)])[name].result(120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        parts = client.list_topics(name, timeout=10).topics[name].partitions
        if len(parts) == partitions and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: no full ISR")


class IdleConsumer:
    """A consumer assigned every partition at the log end, counting its Fetch requests per broker
    from librdkafka's statistics (``brokers.<name>.req.Fetch``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.fetches: dict[str, int] = {}
        self._lock = threading.Lock()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"idle-{topic}",
                                  "fetch.wait.max.ms": FETCH_WAIT_MS, "statistics.interval.ms": STATS_MS,
                                  "enable.auto.commit": False, "stats_cb": self._stats})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def _stats(self, raw: str) -> None:
        stats = json.loads(raw)
        with self._lock:
            for name, broker in stats["brokers"].items():
                if broker.get("nodeid", -1) >= 0:
                    self.fetches[name] = int(broker["req"].get("Fetch", 0))

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.fetches)


def poll_all(consumers: list[IdleConsumer], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            c.consumer.poll(0.05)


def measure(target: str, partitions: int, consumers: int, seconds: float) -> dict[str, Any]:
    with start(target) as running, ExitStack() as stack:
        bootstrap = running.bootstrap_servers
        topic = f"idle-{int(time.time())}"
        create_topic(bootstrap, topic, partitions)
        idle = [IdleConsumer(bootstrap, topic, partitions) for _ in range(consumers)]
        for c in idle:
            stack.callback(c.consumer.close)
        poll_all(idle, 5.0)  # connected, fetching, settled
        pids = {i: b.pid for i, b in running.brokers.items()}
        quorum = getattr(running, "quorum", None)
        if quorum is not None:  # a KRaft cluster's controllers, by their ids (1001..)
            pids.update({i: c.pid for i, c in quorum.controllers.items()})
        cpu_before = {i: cpu_seconds(pid) for i, pid in pids.items()}
        fetch_before = [c.snapshot() for c in idle]
        started = time.monotonic()
        poll_all(idle, seconds)
        elapsed = time.monotonic() - started
        cpu = {i: round(100 * (cpu_seconds(pid) - cpu_before[i]) / elapsed, 2) for i, pid in pids.items()}
        fetch_after = [c.snapshot() for c in idle]
    rates = [sum(after.values()) - sum(before.values()) for before, after in zip(fetch_before, fetch_after, strict=True)]
    brokers_read = max((len(after) for after in fetch_after), default=0) or 1
    return {"target": target, "partitions": partitions, "consumers": consumers, "seconds": round(elapsed, 1),
            "broker_cpu_pct": cpu, "fetch_per_s_per_consumer_per_broker":
            round(sum(rates) / len(rates) / elapsed / brokers_read, 2) if rates else None,
            "expected_fetch_per_s_per_broker": round(1000 / FETCH_WAIT_MS, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--consumers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--targets", default="grete,kafka-3.9")
    args = parser.parse_args(argv)
    results = list(run(args.targets.split(","), args.partitions, args.consumers, args.seconds))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "idle-cluster.json").write_text(json.dumps(
        {"date": time.strftime("%Y-%m-%d"), "results": results}, indent=2) + "\n")


def run(targets: list[str], partitions: int, consumers: int, seconds: float) -> Iterator[dict[str, Any]]:
    for target in targets:
        result = measure(target, partitions, consumers, seconds)
        print(json.dumps(result), flush=True)
        yield result


if __name__ == "__main__":
    main()
