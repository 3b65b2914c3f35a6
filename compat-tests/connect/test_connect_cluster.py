"""Kafka Connect in distributed mode against a 3-broker cluster (grete's, or Kafka 3.9.2 in
ZooKeeper mode with ``--target=kafka-3.9``): internal and data topics with replication factor 3.
The second test SIGKILLs the data partition's leader mid-run (the cluster's last test in the file:
it brings the broker back at the end)."""

from __future__ import annotations

import pytest
from cluster_helpers import create_topic, partitions_seen, unique, wait_until
from connect_worker import ConnectGroup, FilePipe, Worker, numbered, running_worker

LINES = 200

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # a cluster start and JVM workers
# Only the test moves leaders (as in compat-tests/cluster's fault tests).
CLUSTER_OVERRIDES = {"auto.leader.rebalance.enable": "false"}


def replicated_pipe(bootstrap: str, tmp_path, name: str = "file") -> FilePipe:
    topic = unique("connect-data")
    create_topic(bootstrap, topic, partitions=1, replication=3, config={"min.insync.replicas": "2"})
    return FilePipe(topic=topic, source=tmp_path / f"{name}.in", sink=tmp_path / f"{name}.out", name=name)


def test_file_source_to_sink_on_three_brokers(cluster_target, connect_dist, tmp_path):
    bootstrap = cluster_target.bootstrap
    pipe = replicated_pipe(bootstrap, tmp_path)
    lines = numbered("line", 0, LINES)
    pipe.append(lines)
    worker = Worker(connect_dist("4.3.1"), ConnectGroup.new(replication=3), bootstrap, tmp_path / "connect")
    with running_worker(worker):
        pipe.install(worker)
        assert pipe.await_sunk(LINES, worker) == lines
        in_topic, sunk = pipe.settled(bootstrap)
        assert (in_topic, sunk) == (LINES, lines)
    more = numbered("line", LINES, LINES // 2)
    pipe.append(more)
    with running_worker(worker):
        assert pipe.await_sunk(LINES + len(more), worker) == lines + more
        assert pipe.settled(bootstrap) == (LINES + len(more), lines + more)


def test_leader_sigkilled_mid_run(cluster_target, connect_dist, tmp_path):
    """Nothing written to the source file is lost when the data partition's leader is SIGKILLed while
    lines flow; the sink file keeps their order (a line may repeat: the sink is at-least-once)."""
    cluster = cluster_target.cluster
    bootstrap = cluster_target.bootstrap
    pipe = replicated_pipe(bootstrap, tmp_path)
    lines = numbered("line", 0, LINES)
    pipe.append(lines)
    worker = Worker(connect_dist("4.3.1"), ConnectGroup.new(replication=3), bootstrap, tmp_path / "connect")
    victim = -1
    try:
        with running_worker(worker):
            pipe.install(worker)
            pipe.await_sunk(LINES, worker)
            victim = partitions_seen(bootstrap, pipe.topic)[0].leader
            pipe.append(numbered("line", LINES, LINES))
            cluster.kill_broker(victim)
            lines += numbered("line", LINES, LINES)
            survivors = ",".join(cluster.brokers[i].bootstrap_servers for i in cluster_target.running())
            wait_until(lambda: partitions_seen(survivors, pipe.topic)[0].leader not in (-1, victim), 120,
                       "a new leader for the data partition")
            pipe.append(numbered("line", 2 * LINES, LINES))
            lines += numbered("line", 2 * LINES, LINES)
            pipe.await_sunk(len(lines), worker)
            in_topic, sunk = pipe.settled(survivors)
        first_seen = list(dict.fromkeys(sunk))
        assert first_seen == lines, "lines lost or reordered"
        print(f"{cluster_target.name}: {len(sunk) - len(lines)} repeated lines in the sink, "
              f"{in_topic - len(lines)} in the topic")
    finally:
        if victim >= 0 and victim not in cluster_target.running():
            cluster.start_broker(victim)
