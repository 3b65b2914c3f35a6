"""Brokers that fail, stop cleanly, or cannot join, in a grete cluster: what the controller does and
what clients see. Each test restores the cluster it found (every broker running)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from grete.testing.cluster import GreteCluster, cluster, free_port
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def grete_cluster():  # type: ignore[no-untyped-def]
    need_zookeeper()
    # Leadership moves only when a test moves it: the auto-rebalance, 5 s after a failover, would
    # race the preferred election test.
    with cluster(3, overrides={**CLUSTER_OVERRIDES, "auto.leader.rebalance.enable": "false"}) as running:
        yield running


def states(zk: KazooClient, topic: str) -> dict[int, dict[str, object]]:
    found = {}
    for p in zk.get_children(f"/brokers/topics/{topic}/partitions"):
        found[int(p)] = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
    return found


def create(cluster: GreteCluster, name: str, partitions: int, replication: int) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    client.create_topics([NewTopic(name, partitions, replication)])[name].result(30)


def metadata(process_bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    client = AdminClient({"bootstrap.servers": process_bootstrap})
    md = client.list_topics(topic, timeout=10).topics[topic]
    return {p: (m.leader, list(m.isrs), list(m.replicas)) for p, m in md.partitions.items()}


def test_killed_leader_is_replaced_by_the_next_isr_replica(grete_cluster: GreteCluster, zk: KazooClient,
                                                           topic_name: str) -> None:
    create(grete_cluster, topic_name, 3, 3)
    before = states(zk, topic_name)
    victim = before[0]["leader"]
    assert isinstance(victim, int)
    grete_cluster.kill_broker(victim)
    try:
        # The session expires (6 s in these clusters), the controller elects new leaders.
        wait_until(lambda: all(s["leader"] != victim and victim not in s["isr"]  # type: ignore[operator]
                               for s in states(zk, topic_name).values()), 30, "new leaders in ZooKeeper")
        after = states(zk, topic_name)
        for p, state in after.items():
            old = before[p]
            assert state["leader_epoch"] == old["leader_epoch"] + 1  # type: ignore[operator]
            if old["leader"] == victim:
                expected = [r for r in old["isr"] if r != victim][0]  # type: ignore[union-attr]
                assert state["leader"] == expected  # the first live ISR member, in assignment order
        live = next(b for i, b in grete_cluster.brokers.items() if i != victim)
        wait_until(lambda: all(leader != victim for leader, _, _ in metadata(live.bootstrap_servers, topic_name).values()),
                   30, "clients told of the new leaders")
        client = AdminClient({"bootstrap.servers": live.bootstrap_servers})
        assert victim not in client.list_topics(timeout=10).brokers
    finally:
        grete_cluster.start_broker(victim)
    wait_until(lambda: str(victim) in zk.get_children("/brokers/ids"), 30, "the broker registered again")


def controller_of(zk: KazooClient) -> int | None:
    """The broker holding /controller, None between two (it may go between an exists and a get)."""
    try:
        found: int = json.loads(zk.get("/controller")[0])["brokerid"]
    except NoNodeError:
        return None
    return found


def test_controller_failover(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    old = json.loads(zk.get("/controller")[0])["brokerid"]
    epoch = int(zk.get("/controller_epoch")[0])
    grete_cluster.kill_broker(old)
    try:
        wait_until(lambda: controller_of(zk) not in (old, None), 30, "a new controller")
        assert int(zk.get("/controller_epoch")[0]) == epoch + 1
        # The new controller serves: a topic created now gets leaders.
        create(grete_cluster, topic_name, 2, 2)
        assert all(s["controller_epoch"] == epoch + 1 for s in states(zk, topic_name).values())
    finally:
        grete_cluster.start_broker(old)
    wait_until(lambda: str(old) in zk.get_children("/brokers/ids"), 30, "the old controller back as a broker")


def last_lines(grete_cluster: GreteCluster, broker: int, count: int = 40) -> str:
    """A broker's last log lines: what its shutdown was doing when it had to be killed (-9)."""
    return "\n".join(grete_cluster.brokers[broker].log().splitlines()[-count:])


def test_controlled_shutdown_moves_leadership_first(grete_cluster: GreteCluster, zk: KazooClient,
                                                    topic_name: str) -> None:
    create(grete_cluster, topic_name, 3, 3)
    leader = states(zk, topic_name)[0]["leader"]
    assert isinstance(leader, int)
    started = time.monotonic()
    code = grete_cluster.stop_broker(leader)
    try:
        assert code == 0, last_lines(grete_cluster, leader)
        assert time.monotonic() - started < 20
        # Moved before the broker left: no partition is led by it, and it left every ISR.
        after = states(zk, topic_name)
        assert all(s["leader"] != leader and leader not in s["isr"] for s in after.values())  # type: ignore[operator]
        assert f"controlled shutdown of broker {leader} succeeded" in grete_cluster.brokers[leader].log()
    finally:
        grete_cluster.start_broker(leader)


def test_broker_id_already_registered(grete_cluster: GreteCluster) -> None:
    items = grete_cluster.broker_items(1)
    items["log.dirs"] = str(grete_cluster.directory / "duplicate")
    port = free_port()
    items["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
    command = [sys.executable, "-m", "grete.cli", "serve"] + [a for k, v in items.items()
                                                               for a in ("--override", f"{k}={v}")]
    duplicate = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Kafka 3.9 binds before registering but serves only once registered: the duplicate never
        # answers (the connection waits in the backlog until the process exits and resets it).
        wait_until(lambda: _connects(port) or duplicate.poll() is not None, 30, "the duplicate's port bound")
        with pytest.raises(OSError):
            _wire.call("127.0.0.1", port, MetadataRequest(topics=None), MetadataResponse, 1, timeout=60)
        _, stderr = duplicate.communicate(timeout=60)
    finally:
        duplicate.kill()
    assert duplicate.returncode != 0
    assert "broker id 1 is already registered" in stderr


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_zookeeper_unreachable_at_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    need_zookeeper()
    port = free_port()  # nothing listens there
    command = [sys.executable, "-m", "grete.cli", "serve", "--override", "broker.id=1",
               "--override", f"zookeeper.connect=127.0.0.1:{port}", "--override", "zookeeper.connection.timeout.ms=2000",
               "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path}"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"could not connect to ZooKeeper at 127.0.0.1:{port} within 2 s" in done.stderr
    assert time.monotonic() - started < 20


def test_preferred_leader_election(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    """Leadership moved off a broker (it stopped); once it is back in the ISR, ElectLeaders
    PREFERRED hands leadership back; while it is down the answer is PREFERRED_LEADER_NOT_AVAILABLE."""
    create(grete_cluster, topic_name, 1, 3)
    preferred = states(zk, topic_name)[0]["leader"]
    assert isinstance(preferred, int)
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    assert grete_cluster.stop_broker(preferred) == 0, last_lines(grete_cluster, preferred)
    try:
        survivor = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
        refused = survivor.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(30)
        assert refused[TopicPartition(topic_name, 0)].code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    finally:
        grete_cluster.start_broker(preferred)
    wait_until(lambda: preferred in states(zk, topic_name)[0]["isr"], 30, "the preferred replica in the ISR")  # type: ignore[operator]
    client = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    done = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(30)
    assert done[TopicPartition(topic_name, 0)] is None  # no error: elected
    assert states(zk, topic_name)[0]["leader"] == preferred
    again = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(30)
    assert again[TopicPartition(topic_name, 0)].code() == KafkaError.ELECTION_NOT_NEEDED


def test_unclean_election_enabled_on_a_topic_elects_its_offline_partitions(
        grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    """An offline partition (its only in-sync replica gone, another replica back) stays offline while
    unclean election is off, and gets the other replica as leader as soon as the topic's
    ``unclean.leader.election.enable`` is turned on (Kafka's TopicUncleanLeaderElectionEnable), not
    at the next broker change."""
    live = sorted(grete_cluster.brokers)
    first, second = live[-1], live[-2]  # not broker 1, whose listener the tool below uses
    client = AdminClient({"bootstrap.servers": grete_cluster.brokers[live[0]].bootstrap_servers})
    client.create_topics([NewTopic(topic_name, 1, replica_assignment=[[first, second]])])[topic_name].result(30)
    wait_until(lambda: states(zk, topic_name)[0]["isr"] == [first, second], 30, "both replicas in the ISR")
    grete_cluster.kill_broker(second)
    wait_until(lambda: states(zk, topic_name)[0]["isr"] == [first], 60, "the ISR without the second replica")
    grete_cluster.kill_broker(first)
    wait_until(lambda: states(zk, topic_name)[0]["leader"] == -1, 60, "the partition offline")
    try:
        grete_cluster.start_broker(second)
        time.sleep(3)
        assert states(zk, topic_name)[0]["leader"] == -1  # unclean election is off
        futures = client.incremental_alter_configs([ConfigResource(
            "topic", topic_name, incremental_configs=[ConfigEntry("unclean.leader.election.enable", "true",
                                                                  incremental_operation=AlterConfigOpType.SET)])])
        next(iter(futures.values())).result(30)
        wait_until(lambda: states(zk, topic_name)[0]["leader"] == second, 10, "the second replica leading")
        assert states(zk, topic_name)[0]["isr"] == [second]
    finally:
        grete_cluster.start_broker(first)
    wait_until(lambda: str(first) in zk.get_children("/brokers/ids"), 30, "the broker registered again")
