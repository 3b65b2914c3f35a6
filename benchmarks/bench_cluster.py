"""A 3-broker cluster, grete against Apache Kafka 3.9.2 in ZooKeeper mode, and grete against Apache
Kafka 4.3.1 in KRaft mode (3 controllers and 3 brokers each), side by side in one run
(docs/benchmarks.md, "Clusters"):

* start: from nothing (ZooKeeper or the controllers included) to every broker registered and serving
  Metadata;
* acks=all, RF 3, min.insync.replicas=2: produce throughput of an idempotent confluent-kafka
  producer, ``--records`` records of ``--size`` bytes over 3 partitions, and per-record latency
  (p50/p99) of 2000 records sent at a steady 1000 records/s;
* leader failover: SIGKILL of a partition's leader, then the time to the first acknowledged
  acks=all write on that partition (the ZooKeeper session timeout, the same for both, dominates);
* controller failover: SIGKILL of the controller, then the time until another broker holds
  ``/controller``; in KRaft, SIGKILL of the quorum's leader, then the time until a CreateTopics
  through a broker succeeds (a new leader serving metadata changes).

    python -m benchmarks.bench_cluster [--rounds 3] [--records 20000] [--size 1024]
        [--targets grete,kafka-3.9,grete-kraft,kafka-4.3-kraft]

The machine has 2 cores: three brokers and the client share them, so absolute figures are low;
the ratios are what to compare. Prints one JSON line per round and a summary of per-target medians
over the rounds (at least 3); writes
benchmarks/results/cluster-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.testing.cluster import cluster
from tools.kraft_quorum import start_kafka_broker, start_quorum
from tools.reference_kafka_zk import kafka_zk_cluster

SESSION_TIMEOUT_MS = 6000
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "min.insync.replicas": "2",
             "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
             "auto.leader.rebalance.enable": "false"}
RESULTS = Path(__file__).parent / "results"


# KRaft: Kafka's default session (broker.session.timeout.ms, 9 s) on both; no ZooKeeper settings.
KRAFT_OVERRIDES = {k: v for k, v in OVERRIDES.items() if not k.startswith("zookeeper.")}
KRAFT = ("grete-kraft", "kafka-4.3-kraft")
KAFKA_BROKER_IDS = (4, 5, 6)


def start(target: str) -> AbstractContextManager[Any]:
    if target == "grete":
        return cluster(3, overrides=OVERRIDES)
    if target == "grete-kraft":
        return cluster(3, overrides=KRAFT_OVERRIDES, controllers=3)
    if target == "kafka-4.3-kraft":
        return KafkaKRaftCluster(KRAFT_OVERRIDES)
    return kafka_zk_cluster(3, overrides=OVERRIDES)


class KafkaKRaftCluster:
    """Kafka 4.3.1: three controllers and brokers 1..3 (tools/kraft_quorum), with the parts of a
    grete.testing.cluster.GreteCluster this benchmark uses."""

    def __init__(self, overrides: dict[str, str]) -> None:
        self.overrides = overrides
        self.workdir = Path(tempfile.mkdtemp(prefix="kafka-kraft-"))
        self.quorum: Any = None
        self.brokers: dict[int, Any] = {}
        self.launched = 0.0  # when the processes started, every node formatted before

    def __enter__(self) -> KafkaKRaftCluster:
        # Formatted first (kafka-storage format, a JVM per node): an operator's step before the start.
        self.quorum = start_quorum(["kafka"] * 3, self.workdir / "quorum", start=False)
        # Controllers are nodes 1-3 here, and a broker's id must differ from every voter's.
        self.brokers = {i: start_kafka_broker(self.quorum, i, self.workdir / f"broker{i}", self.overrides, start=False)
                        for i in KAFKA_BROKER_IDS}
        self.launched = time.perf_counter()
        for voter in self.quorum.voters.values():
            voter.start()
        for broker in self.brokers.values():
            broker.start()
        await_listed(self.bootstrap_servers, set(KAFKA_BROKER_IDS))
        return self

    def __exit__(self, *_exc: object) -> None:
        for broker in self.brokers.values():
            broker.kill()
        self.quorum.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def kill_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def start_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].start()
        await_listed(self.bootstrap_servers, set(self.brokers))

    def controller_leader(self) -> int:
        return int(self.quorum.leader_view().leader_id)

    def kill_controller(self, node_id: int) -> None:
        self.quorum.voters[node_id].kill()

    def start_controller(self, node_id: int) -> None:
        self.quorum.voters[node_id].start()


def await_listed(bootstrap: str, ids: set[int], timeout: float = 120.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if set(admin.list_topics(timeout=5).brokers) == ids:
                return
        except Exception:  # noqa: BLE001 - not serving yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"brokers {sorted(ids)} not all listed within {timeout} s")


def create_topic(bootstrap: str, name: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, 3, 3)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = client.list_topics(name, timeout=10).topics[name].partitions
        if len(parts) == 3 and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name}: no full ISR")


def latency(bootstrap: str, topic: str, records: int, size: int, rate: int) -> dict[str, float]:
    """Per-record acks=all latency at a steady ``rate`` records/s (no queueing behind a burst)."""
    sent: dict[int, float] = {}
    latencies: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0})
    producer.produce(topic, value=b"warm")  # metadata and the producer id first
    producer.flush(30)
    value = b"x" * size

    def delivered(err: KafkaError | None, message: Any) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent[int(message.key())])
    started = time.perf_counter()
    for i in range(records):
        pause = started + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        sent[i] = time.perf_counter()
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=delivered)
        producer.poll(0)
    producer.flush(60)
    latencies.sort()
    return {"p50_ms": latencies[len(latencies) // 2] * 1000, "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


def produce(bootstrap: str, topic: str, records: int, size: int) -> dict[str, float]:
    sent: dict[int, float] = {}
    latencies: list[float] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            latencies.append(time.perf_counter() - sent[int(message.key())])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, key=b"-1", value=b"warm")  # metadata and the producer id first
    producer.flush(30)
    sent.clear()
    latencies.clear()
    value = b"x" * size
    started = time.perf_counter()
    for i in range(records):
        sent[i] = time.perf_counter()
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    if errors or len(latencies) != records:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return {"mb_per_s": records * size / elapsed / 1e6}


def leader_of(zk: KazooClient, topic: str, partition: int) -> int:
    return int(json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])["leader"])


def watched(zk: KazooClient, path: str, kind: str, accept: Callable[[Any], Any], timeout: float = 120.0) -> Any:
    """The first truthy ``accept(value)`` of ``path``'s data (None while the znode is absent) or
    children, as a ZooKeeper watch delivers them: no read can race the znode's deletion."""
    done = threading.Event()
    found: list[Any] = []

    def changed(value: Any, *_stat: Any) -> bool:
        result = accept(value)
        if result and not done.is_set():
            found.append(result)
            done.set()
        return not done.is_set()  # False ends the watch
    (zk.DataWatch if kind == "data" else zk.ChildrenWatch)(path, changed)
    if not done.wait(timeout):
        raise TimeoutError(f"{path} did not change as awaited within {timeout} s")
    return found[0]


def await_controller(zk: KazooClient, other_than: int | None = None) -> int:
    """The broker holding /controller, once one other than ``other_than`` does."""
    def holder(data: bytes | None) -> int | None:
        broker = int(json.loads(data)["brokerid"]) if data else None
        return broker if broker != other_than else None
    result: int = watched(zk, "/controller", "data", holder)
    return result


def leader_in_metadata(bootstrap: str, topic: str, partition: int) -> int:
    return int(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
               .topics[topic].partitions[partition].leader)


def leader_failover(running: Any, zk: KazooClient | None, topic: str) -> float:
    """SIGKILL the leader of partition 0; seconds until an acks=all write to partition 0 is acked."""
    victim = leader_of(zk, topic, 0) if zk is not None else leader_in_metadata(running.bootstrap_servers, topic, 0)
    others = ",".join(b.bootstrap_servers for i, b in running.brokers.items() if i != victim)
    producer = Producer({"bootstrap.servers": others, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 120000, "retry.backoff.ms": 20, "topic.metadata.refresh.interval.ms": 200})
    acked: list[float] = []
    producer.produce(topic, value=b"warm", partition=0)
    producer.flush(30)
    running.kill_broker(victim)
    killed = time.perf_counter()
    producer.produce(topic, value=b"after", partition=0,
                     on_delivery=lambda err, _m: acked.append(time.perf_counter()) if err is None else None)
    producer.flush(120)
    running.start_broker(victim)
    if not acked:
        raise RuntimeError("the write after the kill was not acknowledged")
    return acked[0] - killed


def controller_failover(running: Any, zk: KazooClient) -> float:
    victim = await_controller(zk)
    running.kill_broker(victim)
    killed = time.perf_counter()
    await_controller(zk, other_than=victim)
    took = time.perf_counter() - killed
    running.start_broker(victim)
    return took


def kraft_controller_failover(running: Any) -> float:
    """SIGKILL the quorum's leader; seconds until a CreateTopics through a broker succeeds."""
    if isinstance(running, KafkaKRaftCluster):
        victim = running.controller_leader()
        kill, restart = running.kill_controller, running.start_controller
    else:
        victim = running.quorum.leader()
        kill, restart = running.quorum.kill, running.quorum.start_controller
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    kill(victim)
    killed = time.perf_counter()
    while True:
        name = f"after-{uuid.uuid4().hex[:8]}"
        try:
            admin.create_topics([NewTopic(name, 1, 3)], request_timeout=2)[name].result(5)
            break
        except Exception:  # noqa: BLE001 - no leader yet: asked again
            if time.perf_counter() - killed > 120:
                raise
    took = time.perf_counter() - killed
    restart(victim)
    return took


def kraft_round(target: str, n: int, records: int, size: int) -> dict[str, Any]:
    started = time.perf_counter()
    with start(target) as running:
        if isinstance(running, KafkaKRaftCluster):
            started = running.launched
        else:
            await_listed(running.bootstrap_servers, set(running.brokers))
        start_s = time.perf_counter() - started
        topic = f"bench-{n}"
        create_topic(running.bootstrap_servers, topic)
        throughput = produce(running.bootstrap_servers, topic, records, size)
        throughput.update(latency(running.bootstrap_servers, topic, 2000, size, 1000))
        leader_s = leader_failover(running, None, topic)
        await_listed(running.bootstrap_servers, set(running.brokers))
        controller_s = kraft_controller_failover(running)
    return {"target": target, "round": n, "start_s": start_s, **throughput, "leader_failover_s": leader_s,
            "controller_failover_s": controller_s}


def one_round(target: str, n: int, records: int, size: int) -> dict[str, Any]:
    if target in KRAFT:
        return kraft_round(target, n, records, size)
    started = time.perf_counter()
    with start(target) as running:
        start_s = time.perf_counter() - started
        zk = KazooClient(hosts=running.zookeeper.connect)
        zk.start(10)
        try:
            topic = f"bench-{n}"
            create_topic(running.bootstrap_servers, topic)
            throughput = produce(running.bootstrap_servers, topic, records, size)
            throughput.update(latency(running.bootstrap_servers, topic, 2000, size, 1000))
            leader_s = leader_failover(running, zk, topic)
            watched(zk, "/brokers/ids", "children", lambda ids: len(ids) == 3)
            controller_s = controller_failover(running, zk)
        finally:
            zk.stop()
            zk.close()
    return {"target": target, "round": n, "start_s": start_s, **throughput, "leader_failover_s": leader_s,
            "controller_failover_s": controller_s}


def rounds(targets: list[str], count: int, records: int, size: int) -> Iterator[dict[str, Any]]:
    for n in range(count):
        for target in targets:  # alternated, so drifts of the machine hit both alike
            yield one_round(target, n, records, size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--targets", default="grete,kafka-3.9")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("the summary is a median: --rounds must be at least 3")
    results = []
    for result in rounds(args.targets.split(","), args.rounds, args.records, args.size):
        print(json.dumps(result), flush=True)
        results.append(result)
    summary: dict[str, dict[str, float]] = {}
    for target in args.targets.split(","):
        mine = [r for r in results if r["target"] == target]
        summary[target] = {key: statistics.median(r[key] for r in mine)
                           for key in ("start_s", "mb_per_s", "p50_ms", "p99_ms", "leader_failover_s",
                                       "controller_failover_s")}
    print(json.dumps({"medians": summary}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results, "medians": summary}, indent=1))


if __name__ == "__main__":
    main()
