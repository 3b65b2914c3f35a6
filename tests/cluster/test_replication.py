"""Replication in a grete cluster: followers hold the leader's log byte for byte, acks=all survives
a leader's death, the ISR follows followers that stall and come back, min.insync.replicas holds,
and a replica that diverged is cut back to the new leader's log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow

LAG_MS = 3000


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    # A session outlives the ISR lag by far: a stalled follower leaves the ISR through its leader
    # (AlterPartition) well before the controller would drop it for an expired session.
    overrides = {**CLUSTER_OVERRIDES, "replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200",
                 "zookeeper.session.timeout.ms": "12000"}
    with cluster(3, overrides=overrides) as running:
        yield running


def create(cluster: GreteCluster, name: str, partitions: int, replication: int,
           config: dict[str, str] | None = None) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    client.create_topics([NewTopic(name, partitions, replication, config=config or {})])[name].result(30)


def create_away_from_controller(cluster: GreteCluster, zk: KazooClient, name: str,
                                config: dict[str, str] | None = None) -> tuple[int, int]:
    """One partition on the two brokers that are not the controller: (leader, follower). Stalling
    that follower then stalls no controller, whose own failover would change the leader epoch."""
    # A broker a previous test paused past its session may still be registering again.
    wait_until(lambda: all(zk.exists(f"/brokers/ids/{b}") for b in cluster.brokers), 60, "every broker registered")
    controller = json.loads(zk.get("/controller")[0])["brokerid"]
    leader, follower = [b for b in sorted(cluster.brokers) if b != controller][:2]
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(name, 1, replica_assignment=[[leader, follower]], config=config or {})
    client.create_topics([topic])[name].result(30)
    return leader, follower


def state(zk: KazooClient, topic: str, partition: int) -> dict[str, object]:
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    found: dict[str, object] = json.loads(data)
    found["zk_version"] = stat.version
    return found


def log_bytes(data_dir: Path, topic: str, partition: int) -> bytes:
    segments = sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
    return b"".join(s.read_bytes() for s in segments)


def consume_all(cluster: GreteCluster, topic: str, expected: int, timeout: float = 60,
                partitions: int = 1) -> list[bytes]:
    """Read from the start without a group: a group needs __consumer_offsets, which (as in Kafka)
    cannot be created with 3 replicas while a broker is down."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                values.append(message.value())
    consumer.close()
    return values


def test_followers_hold_the_leaders_log_byte_for_byte(grete_cluster: GreteCluster, topic_name: str) -> None:
    create(grete_cluster, topic_name, 2, 3)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "compression.type": "lz4", "linger.ms": 5})
    for i in range(2000):
        producer.produce(topic_name, key=str(i % 7).encode(), value=f"value-{i}".encode() * 3,
                         headers=[("h", str(i).encode())])
    assert producer.flush(30) == 0
    for partition in (0, 1):
        wait_until(lambda p=partition: len({log_bytes(b.data_dir, topic_name, p)
                                            for b in grete_cluster.brokers.values()}) == 1,
                   20, "identical replicas")
        assert len(log_bytes(grete_cluster.brokers[1].data_dir, topic_name, partition)) > 10_000


def test_acknowledged_records_survive_the_leaders_death(grete_cluster: GreteCluster, zk: KazooClient,
                                                        topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 3, {"min.insync.replicas": "2"})
    acked: list[bytes] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is None:
            acked.append(message.value())  # type: ignore[attr-defined]
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
    leader = state(zk, topic_name, 0)["leader"]
    assert isinstance(leader, int)
    for i in range(3000):
        producer.produce(topic_name, value=f"r{i}".encode(), on_delivery=delivered)
        if i == 1500:
            producer.flush(30)
            grete_cluster.kill_broker(leader)  # mid-stream: the rest goes to the next leader
        producer.poll(0)
    try:
        assert producer.flush(60) == 0
        assert len(acked) == 3000
        new = state(zk, topic_name, 0)
        assert new["leader"] != leader and new["leader_epoch"] == 1
        values = consume_all(grete_cluster, topic_name, 3000)
        assert sorted(values) == sorted(f"r{i}".encode() for i in range(3000))  # each acked record, once
    finally:
        grete_cluster.start_broker(leader)
    # The restarted replica catches up and is back in the ISR.
    wait_until(lambda: leader in state(zk, topic_name, 0)["isr"], 30, "the old leader back in the ISR")  # type: ignore[operator]


def test_isr_shrinks_and_expands_with_a_stalled_follower(grete_cluster: GreteCluster, zk: KazooClient,
                                                          topic_name: str) -> None:
    _, follower = create_away_from_controller(grete_cluster, zk, topic_name)
    before = state(zk, topic_name, 0)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
    grete_cluster.pause_broker(follower)
    try:
        for _ in range(50):
            producer.produce(topic_name, value=b"x")
            producer.flush(10)
            time.sleep(0.05)
        shrunk = wait_until(lambda: (s := state(zk, topic_name, 0)) and follower not in s["isr"] and s,  # type: ignore[operator]
                            LAG_MS / 1000 + 20, "the stalled follower out of the ISR")
        # A leader's own ISR change: the leader epoch stays, the partition epoch (znode version) moves.
        # (A moved leader epoch means the controller dropped the follower for its expired session
        # first: the leader's AlterPartition did not get through in time; its log says why.)
        assert shrunk["leader"] == before["leader"] and shrunk["leader_epoch"] == before["leader_epoch"], (
            before, shrunk, _isr_lines(grete_cluster, shrunk["leader"]))  # type: ignore[arg-type]
        assert shrunk["zk_version"] > before["zk_version"]  # type: ignore[operator]
    finally:
        grete_cluster.resume_broker(follower)
    wait_until(lambda: follower in state(zk, topic_name, 0)["isr"], 30, "the follower back in the ISR")  # type: ignore[operator]


def _isr_lines(cluster: GreteCluster, broker_id: int) -> list[str]:
    log_text = (cluster.directory / f"broker-{broker_id}.log").read_text(errors="replace")
    return [line for line in log_text.splitlines() if "AlterPartition" in line or "ISR" in line][-20:]


def test_min_insync_replicas(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    _, follower = create_away_from_controller(grete_cluster, zk, topic_name, {"min.insync.replicas": "2"})
    grete_cluster.pause_broker(follower)
    try:
        wait_until(lambda: follower not in state(zk, topic_name, 0)["isr"], LAG_MS / 1000 + 20,  # type: ignore[operator]
                   "the ISR down to the leader")
        errors: list[int] = []
        strict = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all", "retries": 0,
                           "enable.idempotence": False, "message.timeout.ms": 5000})
        strict.produce(topic_name, value=b"no", on_delivery=lambda err, _m: errors.append(err.code() if err else 0))
        strict.flush(10)
        assert errors == [KafkaError.NOT_ENOUGH_REPLICAS]
        relaxed = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
        relaxed.produce(topic_name, value=b"yes", on_delivery=lambda err, _m: errors.append(err.code() if err else 0))
        relaxed.flush(10)
        assert errors[1:] == [0]
    finally:
        grete_cluster.resume_broker(follower)
    wait_until(lambda: follower in state(zk, topic_name, 0)["isr"], 30, "the follower back")  # type: ignore[operator]


def test_diverged_replica_is_truncated_to_the_new_leaders_log(grete_cluster: GreteCluster, zk: KazooClient,
                                                              topic_name: str) -> None:
    """KIP-101's case: the old leader holds records no one else has (acks=1, its follower stalled);
    an unclean election makes the follower leader, which takes other records at the same offsets.
    The old leader comes back, finds the diverging epoch and cuts its tail: one log again."""
    old_leader, follower = create_away_from_controller(grete_cluster, zk, topic_name,
                                                       {"unclean.leader.election.enable": "true"})
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all"})
    producer.produce(topic_name, value=b"both")
    assert producer.flush(10) == 0
    grete_cluster.pause_broker(follower)
    # The follower's last fetch may still be parked on the leader (replica.fetch.wait.max.ms,
    # 500 ms): its answer would carry the next records into the stopped follower's socket buffer.
    # Let it expire empty first, so the records below really are on the old leader only.
    time.sleep(1.0)
    lonely = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
    for _ in range(5):
        lonely.produce(topic_name, value=b"only-on-the-old-leader")
    assert lonely.flush(10) == 0
    wait_until(lambda: follower not in state(zk, topic_name, 0)["isr"], LAG_MS / 1000 + 20,  # type: ignore[operator]
               "the stalled follower out of the ISR")
    grete_cluster.kill_broker(old_leader)
    grete_cluster.resume_broker(follower)
    try:
        wait_until(lambda: state(zk, topic_name, 0)["leader"] == follower, 30, "the unclean election")
        after = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
        for _ in range(3):
            after.produce(topic_name, value=b"new-leader")
        assert after.flush(20) == 0
    finally:
        grete_cluster.start_broker(old_leader)
    wait_until(lambda: log_bytes(grete_cluster.brokers[old_leader].data_dir, topic_name, 0)
               == log_bytes(grete_cluster.brokers[follower].data_dir, topic_name, 0), 30, "one log again")
    values = consume_all(grete_cluster, topic_name, 4)
    assert values == [b"both", b"new-leader", b"new-leader", b"new-leader"], (
        state(zk, topic_name, 0), grete_cluster.brokers[follower].log()[-3000:])


def test_transactions_across_leaders(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    """A transaction writing to partitions led by every broker: the coordinator writes the markers
    it can itself and sends WriteTxnMarkers to the other leaders; read_committed readers see the
    committed records and none of the aborted ones."""
    create(grete_cluster, topic_name, 3, 3)
    assert {state(zk, topic_name, p)["leader"] for p in range(3)} == {1, 2, 3}
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for p in range(3):
            for i in range(5):
                producer.produce(topic_name, value=f"{outcome}-{p}-{i}".encode(), partition=p)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(3)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 30 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    time.sleep(1)
    values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    assert len(values) == 30 and all(v.startswith(b"commit-") for v in values)


def test_an_idle_consumer_fetches_once_per_max_wait(grete_cluster: GreteCluster, topic_name: str) -> None:
    """Followers fetching an idle partition move nothing, so they wake no parked consumer fetch: an
    idle consumer sends one Fetch per ``fetch.wait.max.ms`` to each leader, as on Kafka (2 a second
    here), not one per follower round trip."""
    create(grete_cluster, topic_name, 3, 3)
    wait_until(lambda: all(len(p.isrs) == 3 for p in AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
                           .list_topics(topic_name, timeout=10).topics[topic_name].partitions.values()),
               what="a full ISR")
    fetches: dict[str, int] = {}

    def stats(raw: str) -> None:
        for name, broker in json.loads(raw)["brokers"].items():
            if broker.get("nodeid", -1) >= 0:
                fetches[name] = int(broker["req"].get("Fetch", 0))

    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": topic_name,
                         "fetch.wait.max.ms": 500, "statistics.interval.ms": 500, "stats_cb": stats})
    try:
        consumer.assign([TopicPartition(topic_name, p, 0) for p in range(3)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            consumer.poll(0.1)  # connected, fetching, settled
        before, started = dict(fetches), time.monotonic()
        while time.monotonic() < started + 4:
            consumer.poll(0.1)
        elapsed = time.monotonic() - started
        after = dict(fetches)
    finally:
        consumer.close()
    rates = {name: (after[name] - before.get(name, 0)) / elapsed for name in after}
    assert len(rates) == 3 and all(rate <= 4 for rate in rates.values()), rates
