"""``grete host`` as an operator runs it: two "hosts" (two ``grete host`` services, two brokers
each) join one KRaft controller from one properties file each; a topic's replicas land on both
hosts (the brokers' rack is their host); a broker that dies is reported while its neighbour serves
on; SIGTERM stops a host's brokers with a controlled shutdown and the service exits 0."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.common import free_ports
from grete.testing.kraft import ControllerQuorum
from tests.cluster.conftest import wait_until

pytestmark = pytest.mark.slow


class Host:
    """One ``grete host`` process and its output, line by line."""

    def __init__(self, directory: Path, properties: dict[str, str], *args: str) -> None:
        directory.mkdir(parents=True)
        path = directory / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grete.cli", "host", str(path), "--dir", str(directory / "run"), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def await_line(self, needle: str, timeout: float = 60) -> str:
        while True:
            line = self.lines.get(timeout=timeout)
            assert line is not None, f"grete host exited before '{needle}':\n" + "\n".join(self.seen)
            self.seen.append(line)
            if needle in line:
                return line

    def pids(self) -> dict[int, int]:
        """Broker id → pid, from the start-up lines."""
        found = {}
        for line in self.seen:
            if line.startswith("broker ") and "(pid " in line:
                broker_id, pid = line.split()[1], line.split("(pid ")[1].split(")")[0]
                found[int(broker_id)] = int(pid)
        return found


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[ControllerQuorum]:
    (tmp_path / "controllers").mkdir()
    controllers = ControllerQuorum(tmp_path / "controllers", count=1)
    controllers.start()
    try:
        yield controllers
    finally:
        controllers.stop()


def host_properties(quorum: ControllerQuorum, first_id: int, port: int, data: Path) -> dict[str, str]:
    return {**quorum.broker_items(first_id), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(data), "offsets.topic.replication.factor": "2",
            "group.initial.rebalance.delay.ms": "0"}


def test_two_hosts_of_brokers_share_replicas_across_hosts(quorum: ControllerQuorum, tmp_path: Path) -> None:
    port_a, port_b = free_ports(2), free_ports(2)
    hosts = {"a": Host(tmp_path / "a", host_properties(quorum, 1, port_a, tmp_path / "a-data"),
                       "--brokers", "2", "--cluster-id", quorum.cluster_id, "--override", "broker.rack=host-a"),
             "b": Host(tmp_path / "b", host_properties(quorum, 11, port_b, tmp_path / "b-data"),
                       "--brokers", "2", "--cluster-id", quorum.cluster_id, "--override", "broker.rack=host-b")}
    try:
        for host in hosts.values():
            host.await_line("Ctrl-C stops every broker")
        assert set(hosts["a"].pids()) == {1, 2} and set(hosts["b"].pids()) == {11, 12}
        bootstrap = f"127.0.0.1:{port_a},127.0.0.1:{port_b + 1}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == {1, 2, 11, 12}, 60,
                   "all four brokers registered")
        topic = f"hosts-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 4, 2)])[topic].result(30)
        racks = {1: "a", 2: "a", 11: "b", 12: "b"}
        partitions = wait_until(lambda: admin.list_topics(topic, timeout=5).topics[topic].partitions or None, 30)
        for p in partitions.values():
            assert {racks[r] for r in p.replicas} == {"a", "b"}, p.replicas

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for n in range(4):
            producer.produce(topic, f"v{n}".encode(), partition=n)
        assert producer.flush(30) == 0

        # A broker that dies is reported with its log; its neighbour on the host serves on.
        victim = hosts["b"].pids()[12]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        hosts["b"].await_line("broker 12")
        assert "killed by SIGKILL" in hosts["b"].seen[-1]
        assert hosts["b"].process.poll() is None

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        values = set()
        wait_until(lambda: values.update(m.value() for m in consumer.consume(4, 1) if m.error() is None)
                   or len(values) == 4, 60, "the four records")
        consumer.close()
        assert values == {b"v0", b"v1", b"v2", b"v3"}

        # SIGTERM: a controlled shutdown of both brokers, then the service exits 0.
        hosts["a"].process.send_signal(signal.SIGTERM)
        assert hosts["a"].process.wait(120) == 0
        assert "stopping 2 brokers" in "\n".join(hosts["a"].seen + _drain(hosts["a"]))
        for pid in hosts["a"].pids().values():
            wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 30, f"broker pid {pid} gone")
    finally:
        for host in hosts.values():
            if host.process.poll() is None:
                host.process.send_signal(signal.SIGTERM)
                host.process.wait(120)


def _drain(host: Host) -> list[str]:
    lines = []
    while True:
        try:
            line = host.lines.get(timeout=5)
        except queue.Empty:
            return lines
        if line is None:
            return lines
        lines.append(line)


def test_unformatted_dirs_without_a_cluster_id_are_refused(quorum: ControllerQuorum, tmp_path: Path) -> None:
    host = Host(tmp_path / "a", host_properties(quorum, 1, free_ports(2), tmp_path / "data"), "--brokers", "2")
    assert host.process.wait(60) == 2
    output = "\n".join(_drain(host))
    assert "not formatted" in output and "--cluster-id" in output
