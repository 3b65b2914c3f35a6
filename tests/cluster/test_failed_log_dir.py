"""One of a broker's two log dirs fails on a cluster (Kafka's JBOD, KIP-112 and KIP-858): the broker
keeps running and keeps leading the partitions of its other dir, while those of the failed dir get
new leaders from their ISRs at once, its replicas there leave their ISRs, Metadata lists them as
offline, and an acks=all producer loses nothing. On KRaft the broker reports the dir in its
heartbeat and the controller knows which replicas it held because the broker told it where it
placed each one (AssignReplicasToDirs); in ZooKeeper mode the broker writes a log dir event
notification and the controller asks it which of its partitions are offline (LeaderAndIsr)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    MetadataRequest,
    MetadataResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster
from tests.small_disk import small_disk
from tools.kraft_quorum import start_grete_broker, start_kafka_broker, start_quorum, wait_for
from tools.reference_kafka_zk import KafkaZkCluster, kafka_zk_cluster

pytestmark = pytest.mark.slow

PARTITIONS = 6


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "small", "16m") as mounted:
        yield mounted


def _metadata(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, ISR, offline replicas), as broker 1 answers Metadata."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    wire = Wire(host, int(port), timeout=10)
    try:
        answer = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                           MetadataResponse, 9)
    finally:
        wire.close()
    return {p.partition_index: (p.leader_id, list(p.isr_nodes), list(p.offline_replicas))
            for p in answer.topics[0].partitions}


def _move(address: str, partition: int, to: Path) -> None:
    """AlterReplicaLogDirs on the broker at ``address``: partition ``partition`` of "t" to ``to``."""
    host, port = address.rsplit(":", 1)
    wire = Wire(host, int(port), timeout=10)
    try:
        request = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path=str(to), topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name="t", partitions=[partition])])])
        answer = wire.call(request, AlterReplicaLogDirsResponse, 2)
    finally:
        wire.close()
    assert answer.results[0].partitions[0].error_code == 0
    deadline = time.monotonic() + 30
    while not (to / f"t-{partition}").exists():
        assert time.monotonic() < deadline, f"t-{partition} did not move to {to}"
        time.sleep(0.1)


def _fail_one_dir(bootstrap: str, failing: int, others: tuple[int, int], big: Path, small: Path,
                  alive: Callable[[], bool], log_text: Callable[[], str], failing_address: str) -> None:
    """Broker ``failing`` has the dirs ``big`` and ``small`` (on a tmpfs); one of its replicas moves
    from ``small`` to ``big`` (the controller must learn where it went); fill ``small`` under a
    producer's writes and check what the cluster does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Every partition led by the failing broker: its two dirs take three each (the one with fewest first).
    assignment = [[failing, *others] for _ in range(PARTITIONS)]
    admin.create_topics([NewTopic("t", PARTITIONS, replica_assignment=assignment)])["t"].result(30)
    deadline = time.monotonic() + 30
    while not all((small / f"t-{i}").exists() or (big / f"t-{i}").exists() for i in range(PARTITIONS)):
        assert time.monotonic() < deadline, f"broker {failing} did not open its replicas"
        time.sleep(0.1)
    on_small = {i for i in range(PARTITIONS) if (small / f"t-{i}").exists()}
    assert len(on_small) > 1 and len(on_small) < PARTITIONS
    moved_away = min(on_small)
    _move(failing_address, moved_away, big)
    on_small.discard(moved_away)
    time.sleep(1)  # the placements reach the controller (KRaft) before the dir fails
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000})
    errors: list[str] = []
    delivered = [0]

    def done(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))

    subprocess.run(["dd", "if=/dev/zero", f"of={small.parent / 'filler'}", "bs=1M", "count=64"], capture_output=True)
    for n in range(600):
        producer.produce("t", b"x" * 1000, partition=n % PARTITIONS, callback=done)
    assert producer.flush(90) == 0
    assert not errors and delivered[0] == 600
    assert alive(), f"broker {failing} stopped with one dir left"
    deadline = time.monotonic() + 30
    while True:
        state = _metadata(bootstrap, "t")
        moved = all(state[i][0] in others and failing not in state[i][1] and state[i][2] == [failing]
                    for i in on_small)
        stayed = all(state[i][0] == failing and state[i][2] == [] for i in range(PARTITIONS) if i not in on_small)
        if moved and stayed:
            break
        assert time.monotonic() < deadline, f"on the failed dir: {sorted(on_small)}; metadata: {state}"
        time.sleep(0.2)
    assert str(small) in log_text()


@pytest.mark.parametrize("mode", ["kraft", "zookeeper"])
def test_one_of_two_log_dirs_fails(mode: str, disk: Path, tmp_path: Path) -> None:
    big, small = tmp_path / "big", disk / "data"
    with cluster(3, directory=tmp_path / "c", controllers=1 if mode == "kraft" else 0,
                 broker_overrides={2: {"log.dirs": f"{big},{small}"}}) as nodes:
        broker2 = nodes.brokers[2]
        _fail_one_dir(nodes.bootstrap_servers, 2, (1, 3), big, small, lambda: broker2.process.poll() is None,
                      lambda: broker2.log_path.read_text(errors="replace"), broker2.bootstrap_servers)
        assert "Traceback" not in broker2.log_path.read_text(errors="replace")
        # The disk freed and the broker restarted (a failed dir comes back only then, as in Kafka):
        # its replicas there catch up, rejoin their ISRs, lead again and hold every record.
        (disk / "filler").unlink()
        nodes.stop_broker(2)
        nodes.start_broker(2)
        deadline = time.monotonic() + 60
        while any(len(isr) < 3 for _leader, isr, _offline in _metadata(nodes.bootstrap_servers, "t").values()):
            assert time.monotonic() < deadline, f"not back in every ISR: {_metadata(nodes.bootstrap_servers, 't')}"
            time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap_servers})
        partitions = [TopicPartition("t", i) for i in range(PARTITIONS)]
        # Asked again until the brokers' metadata shows it (it follows the election; a replica the
        # controller has not yet seen back in its ISR is not elected the first time).
        deadline = time.monotonic() + 30
        while True:
            elected = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(30)
            if all(leader == 2 for leader, _isr, _offline in _metadata(nodes.bootstrap_servers, "t").values()):
                break
            assert time.monotonic() < deadline, f"not leading again: {_metadata(nodes.bootstrap_servers, 't')}, {elected}"
            time.sleep(0.5)
        consumer = Consumer({"bootstrap.servers": nodes.bootstrap_servers, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", i, OFFSET_BEGINNING) for i in range(PARTITIONS)])
        read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(read) < 600 and time.monotonic() < deadline:
            read += [m.value() for m in consumer.consume(600, 0.5) if m.error() is None]
        consumer.close()
        assert len(read) == 600


@pytest.mark.long
@pytest.mark.parametrize(("controller", "kinds"), [
    ("kafka", ["grete", "grete", "grete"]),  # grete's placements and heartbeats to Kafka's controller
    ("grete", ["grete", "kafka", "grete"]),  # Kafka's to grete's (the middle broker has the two dirs)
    ("kafka", ["kafka", "kafka", "kafka"]),  # the reference
], ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_one_of_two_log_dirs_fails_on_mixed_clusters(controller: str, kinds: list[str], disk: Path, tmp_path: Path,
                                                      started: list[Any]) -> None:
    quorum = start_quorum([controller], tmp_path / "quorum")
    started.append(quorum)
    quorum.leader_view()
    big, small = tmp_path / "big", disk / "data"
    brokers = []
    for offset, kind in enumerate(kinds):
        start = start_grete_broker if kind == "grete" else start_kafka_broker
        extra = {"log.dirs": f"{big},{small}"} if offset == 1 else {}
        brokers.append(start(quorum, 10 + offset, tmp_path / f"broker{10 + offset}", extra))
        started.append(brokers[-1])
    failing = brokers[1]
    bootstrap = brokers[0].bootstrap
    wait_for(lambda: len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers) == 3, 120,
             "every broker listed")
    _fail_one_dir(bootstrap, 11, (10, 12), big, small,
                  lambda: failing.process is not None and failing.process.poll() is None,
                  lambda: failing.log.read_text(errors="replace"), failing.bootstrap)


@pytest.mark.long
@pytest.mark.parametrize(("cluster_kind", "joiner_kind"), [
    ("grete", "kafka"),  # a Kafka 3.9.2 broker's log dir event to grete's controller
    ("kafka", "grete"),  # grete's to Kafka 3.9.2's controller
    ("kafka", "kafka"),  # the reference
])
def test_one_of_two_log_dirs_fails_on_mixed_zookeeper_clusters(cluster_kind: str, joiner_kind: str, disk: Path,
                                                                tmp_path: Path) -> None:
    """Brokers 1-3 of one kind (broker 1 the controller), broker 4 of the other with the two dirs."""
    big, small = tmp_path / "big", disk / "data"
    dirs = {"log.dirs": f"{big},{small}"}
    running = (cluster(3, directory=tmp_path / "c") if cluster_kind == "grete"
               else kafka_zk_cluster(3, directory=tmp_path / "c"))
    with running as nodes:
        joiner: Any = (GreteCluster(tmp_path / "j", nodes.zookeeper, dirs) if joiner_kind == "grete"
                       else KafkaZkCluster(tmp_path / "j", nodes.zookeeper, dirs))
        (tmp_path / "j").mkdir()
        broker = joiner.start_broker(4)
        try:
            bootstrap = nodes.bootstrap_servers
            wait_for(lambda: len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers) == 4,
                     60, "every broker listed")
            _fail_one_dir(bootstrap, 4, (1, 2), big, small, lambda: broker.process.poll() is None,
                          lambda: broker.log_path.read_text(errors="replace"), broker.bootstrap_servers)
        finally:
            broker.stop(30)
