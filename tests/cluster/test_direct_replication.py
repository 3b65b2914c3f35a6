"""Replication push over the direct path (shm): a 3-broker cluster with ``direct.replication.enable``.

Leaders push appends into their followers' receive regions; followers stop fetching data for pushed
partitions. Checked: acks=all produce is acknowledged through pushes (the leader's push counters
move, the followers' replica fetchers carry no record bytes meanwhile), replicas are byte-identical,
a SIGKILLed follower catches up by fetching and is pushed to again, and a leader change mid-stream
loses no acknowledged write.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from kazoo.client import KazooClient

from grete.testing.cluster import GreteCluster, cluster, free_port
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until
from tests.cluster.test_replication import consume_all, create, create_away_from_controller, log_bytes, state

pytestmark = pytest.mark.slow  # a 3-broker cluster per module, brokers killed

PUSH_OVERRIDES = {**CLUSTER_OVERRIDES, "direct.transports": "shm", "direct.replication.enable": "true",
                  "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200",
                  "replica.fetch.wait.max.ms": "200"}


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    metrics = {b: {"metrics.listener": f"http://127.0.0.1:{free_port()}"} for b in (1, 2, 3)}
    with cluster(3, overrides=PUSH_OVERRIDES, broker_overrides=metrics) as running:
        yield running


def counters(cluster: GreteCluster, broker: int) -> dict[str, float]:
    url = cluster.broker_items(broker)["metrics.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith(("grete_direct_replication_", "kafka_server_fetcherstats_bytespersec_total")):
            name, value = line.rsplit(" ", 1)
            found[name.removeprefix("grete_direct_replication_").removesuffix("_total")] = float(value)
    return found


def pushing(cluster: GreteCluster, leader: int, followers: list[int]) -> bool:
    """Each follower has taken at least one push (the registration follows a clean fetch)."""
    return all(counters(cluster, f)["pushes_received"] > 0 for f in followers) and \
        counters(cluster, leader)["pushes"] > 0


def until_data_pushed(cluster: GreteCluster, broker: int, producer: Producer, topic: str) -> None:
    """Produce small probes until ``broker`` has data pushed to it. Only this test writes records,
    so the data (not a high-watermark push of another topic's new leader) is this topic's."""
    start = counters(cluster, broker)["push_bytes_received"]

    def probe() -> bool:
        producer.produce(topic, value=b"probe" * 20)
        assert producer.flush(10) == 0
        return counters(cluster, broker)["push_bytes_received"] > start
    wait_until(probe, 30, f"appends pushed to broker {broker}")


def roles(zk: KazooClient, topic: str) -> tuple[int, list[int]]:
    found = state(zk, topic, 0)
    leader = found["leader"]
    isr = found["isr"]
    assert isinstance(leader, int) and isinstance(isr, list)
    return leader, [b for b in isr if b != leader]


def identical(cluster: GreteCluster, topic: str, brokers: list[int] | None = None) -> bool:
    return len({log_bytes(b.data_dir, topic, 0) for i, b in cluster.brokers.items()
                if brokers is None or i in brokers}) == 1


def test_acks_all_is_acknowledged_through_pushes(grete_cluster: GreteCluster, zk: KazooClient,
                                                 topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 3, {"min.insync.replicas": "3"})
    leader, followers = roles(zk, topic_name)
    assert len(followers) == 2
    wait_until(lambda: pushing(grete_cluster, leader, followers), 20, "pushes to both followers")
    before = {b: counters(grete_cluster, b) for b in grete_cluster.brokers}
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all", "linger.ms": 2})
    errors: list[KafkaError] = []
    for i in range(3000):
        producer.produce(topic_name, key=str(i % 5).encode(), value=f"value-{i}".encode() * 4,
                         on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors
    after = {b: counters(grete_cluster, b) for b in grete_cluster.brokers}
    # min.insync.replicas=3: every acknowledgement needed both followers' log end offsets, which
    # reached the leader only through push credits: the followers fetched no record byte.
    assert after[leader]["pushes"] > before[leader]["pushes"]
    assert after[leader]["push_bytes"] - before[leader]["push_bytes"] > 2 * 60_000
    for f in followers:
        assert after[f]["push_bytes_received"] - before[f]["push_bytes_received"] > 60_000
        assert after[f]["kafka_server_fetcherstats_bytespersec"] == before[f]["kafka_server_fetcherstats_bytespersec"]
        assert after[f]["push_fallbacks"] == before[f]["push_fallbacks"]
    wait_until(lambda: identical(grete_cluster, topic_name), 20, "identical replicas")
    assert len(log_bytes(grete_cluster.brokers[leader].data_dir, topic_name, 0)) > 60_000


def test_a_killed_follower_catches_up_and_is_pushed_to_again(grete_cluster: GreteCluster, zk: KazooClient,
                                                             topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, followers = roles(zk, topic_name)
    wait_until(lambda: pushing(grete_cluster, leader, followers), 20, "pushes to both followers")
    victim = followers[0]
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 30000})
    grete_cluster.kill_broker(victim)
    try:
        for i in range(500):
            producer.produce(topic_name, value=f"while-down-{i}".encode())
        assert producer.flush(30) == 0
    finally:
        grete_cluster.start_broker(victim)
    # It fetched what it missed (the fallback), then the leader pushes to it again.
    wait_until(lambda: counters(grete_cluster, victim)["kafka_server_fetcherstats_bytespersec"] > 0, 30,
               "the restarted follower fetching")
    until_data_pushed(grete_cluster, victim, producer, topic_name)
    before = counters(grete_cluster, victim)
    for i in range(500):
        producer.produce(topic_name, value=f"after-{i}".encode() * 5)
    assert producer.flush(30) == 0
    wait_until(lambda: identical(grete_cluster, topic_name), 20, "identical replicas")
    after = counters(grete_cluster, victim)
    assert after["push_bytes_received"] - before["push_bytes_received"] > 10_000
    # the rest came by push
    assert after["kafka_server_fetcherstats_bytespersec"] == before["kafka_server_fetcherstats_bytespersec"]
    wait_until(lambda: victim in state(zk, topic_name, 0)["isr"], 30, "back in the ISR")  # type: ignore[operator]


def test_a_leader_change_mid_stream_loses_no_acknowledged_write(grete_cluster: GreteCluster, zk: KazooClient,
                                                                topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, followers = roles(zk, topic_name)
    wait_until(lambda: pushing(grete_cluster, leader, followers), 20, "pushes to both followers")
    acked: list[bytes] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is None:
            acked.append(message.value())  # type: ignore[attr-defined]
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
    total = 2000
    try:
        for i in range(total):
            producer.produce(topic_name, value=f"r{i}".encode(), on_delivery=delivered)
            if i == total // 2:
                producer.flush(30)
                grete_cluster.kill_broker(leader)  # mid-stream: the rest goes to the next leader
            producer.poll(0)
        assert producer.flush(60) == 0
        assert len(acked) == total
        new_leader, _ = roles(zk, topic_name)
        assert new_leader != leader
        values = consume_all(grete_cluster, topic_name, total)
        assert sorted(values) == sorted(f"r{i}".encode() for i in range(total))  # each acked record, once
        # The new leader pushes to the remaining follower.
        for other in [b for b in followers if b != new_leader]:
            until_data_pushed(grete_cluster, other, producer, topic_name)
    finally:
        grete_cluster.start_broker(leader)
    wait_until(lambda: identical(grete_cluster, topic_name), 30, "identical replicas")


def test_a_stalled_pushed_follower_leaves_the_isr_and_comes_back(grete_cluster: GreteCluster, zk: KazooClient,
                                                                 topic_name: str) -> None:
    """replica.lag.time.max.ms as with fetch: a follower whose credits stop coming back leaves the ISR
    (the leader's AlterPartition, leader epoch unchanged) and rejoins once it has caught up."""
    leader, follower = create_away_from_controller(grete_cluster, zk, topic_name)
    wait_until(lambda: pushing(grete_cluster, leader, [follower]), 20, "pushes to the follower")
    before = state(zk, topic_name, 0)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
    # The producer learns the leader first: its metadata request must not go to the paused broker.
    producer.produce(topic_name, value=b"first")
    assert producer.flush(10) == 0
    grete_cluster.pause_broker(follower)
    try:
        # Paused for less than the ZooKeeper session (6 s): the ISR lag (3 s) acts first.
        for _ in range(5):
            producer.produce(topic_name, value=b"x" * 100)
            producer.flush(10)
        shrunk = wait_until(lambda: (s := state(zk, topic_name, 0)) and follower not in s["isr"] and s,  # type: ignore[operator]
                            20, "the stalled follower out of the ISR")
        assert shrunk["leader_epoch"] == before["leader_epoch"]
    finally:
        grete_cluster.resume_broker(follower)
    wait_until(lambda: follower in state(zk, topic_name, 0)["isr"], 30, "the follower back in the ISR")  # type: ignore[operator]
    until_data_pushed(grete_cluster, follower, producer, topic_name)
    wait_until(lambda: identical(grete_cluster, topic_name, [leader, follower]), 20, "identical replicas")


def test_a_pushed_follower_whose_session_expired_rejoins_the_isr(grete_cluster: GreteCluster, zk: KazooClient,
                                                                 topic_name: str) -> None:
    """Paused past its ZooKeeper session: the controller drops the broker, the leader's ISR change
    for it is refused while it is away. Once it has registered again the leader proposes it anew,
    though a pushed follower that caught up says nothing more until the next append."""
    leader, follower = create_away_from_controller(grete_cluster, zk, topic_name)
    wait_until(lambda: pushing(grete_cluster, leader, [follower]), 20, "pushes to the follower")
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "1"})
    # The producer learns the leader first: its metadata request must not go to the paused broker.
    producer.produce(topic_name, value=b"first")
    assert producer.flush(10) == 0
    grete_cluster.pause_broker(follower)
    try:
        for _ in range(3):
            producer.produce(topic_name, value=b"x" * 100)
            assert producer.flush(10) == 0
        wait_until(lambda: zk.exists(f"/brokers/ids/{follower}") is None, 30, "the paused broker's session expired")
    finally:
        grete_cluster.resume_broker(follower)
    try:
        wait_until(lambda: follower in state(zk, topic_name, 0)["isr"], 30, "the follower back in the ISR")  # type: ignore[operator]
        wait_until(lambda: identical(grete_cluster, topic_name, [leader, follower]), 20, "identical replicas")
    except AssertionError as exc:
        # Rare on a loaded machine: say what each broker did (a CI run shows only this message).
        tails = {b: grete_cluster.brokers[b].log().splitlines()[-25:] for b in (leader, follower)}
        raise AssertionError(f"{exc}; znode {zk.exists(f'/brokers/ids/{follower}')}, state "
                             f"{state(zk, topic_name, 0)}; logs: {tails}") from None


def test_follower_fetches_are_counted_as_fetchfollower(grete_cluster: GreteCluster, zk: KazooClient,
                                                       topic_name: str) -> None:
    """Kafka's request metrics name a replica's Fetch FetchFollower (and count it under Fetch too):
    a follower fetches until its first clean fetch registers it for pushes."""
    create_away_from_controller(grete_cluster, zk, topic_name)
    def count(broker: int, request: str) -> float:
        url = grete_cluster.broker_items(broker)["metrics.listener"] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(f'kafka_network_requestmetrics_totaltimems_count{{request="{request}"}}'):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0
    followers = wait_until(lambda: sum(count(b, "FetchFollower") for b in (1, 2, 3)), 20, "follower fetches")
    assert sum(count(b, "Fetch") for b in (1, 2, 3)) >= followers
