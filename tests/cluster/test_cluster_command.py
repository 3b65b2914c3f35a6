"""``grete cluster`` as an operator runs it: a subprocess that reports a broker's death, restarts it on
``grete cluster restart N``, lists its brokers with ``grete cluster status`` and stops every process
it runs (restarted ones included) on SIGINT; with ZooKeeper (``--zookeeper``) and with its default,
a KRaft controller quorum, whose controllers are watched and restarted the same way."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from grete.testing import _wire
from grete.testing.common import free_ports
from tests.cluster.conftest import need_zookeeper, wait_until

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 120


class Supervisor:
    """The ``grete cluster`` process and its output, line by line (stdout and stderr together)."""

    def __init__(self, directory: Path, brokers: int, *mode: str) -> None:
        self.directory = directory
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grete.cli", "cluster", "--brokers", str(brokers), "--dir", str(directory), *mode],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen: list[str] = []

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def await_line(self, needle: str, timeout: float = 60) -> list[str]:
        """The output since the last call, up to and including the first line containing ``needle``."""
        start = len(self.seen)
        while True:
            line = self.lines.get(timeout=timeout)
            assert line is not None, f"grete cluster exited before '{needle}':\n" + "\n".join(self.seen)
            self.seen.append(line)
            if needle in line:
                return self.seen[start:]

    def command(self, *words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "grete.cli", "cluster", *words, "--dir", str(self.directory)],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    def status(self) -> dict[str, dict[str, str]]:
        done = self.command("status")
        assert done.returncode == 0, done.stderr
        header, *rows = done.stdout.splitlines()
        assert header.split() == ["BROKER", "PID", "PORT", "ROLE", "HEALTH"]
        table = {}
        for row in rows:
            name, pid, port, role, health = row.split(maxsplit=4)
            table[name] = {"pid": pid, "port": port, "role": role, "health": health}
        return table


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    need_zookeeper()
    yield from _supervised(Supervisor(tmp_path / "cluster", 2, "--zookeeper"))


@pytest.fixture
def kraft_supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    yield from _supervised(Supervisor(tmp_path / "cluster", 2, "--controllers", "3"))


def _supervised(running: Supervisor) -> Iterator[Supervisor]:
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGINT)
            try:
                running.process.wait(90)
            except subprocess.TimeoutExpired:
                running.process.kill()
                running.process.wait(10)


def _create_and_write(create_port: int, write_port: int) -> None:
    """A new topic of 2 partitions created through one broker, a record written to each partition
    through another (acks=all), both acknowledged."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    _wire.create_topic("127.0.0.1", create_port, topic, 2, {})
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{write_port}", "acks": "all"})
    delivered: list[object] = []
    for partition in (0, 1):
        producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None, None]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_death_reported_restart_status_and_sigint_stops_everything(supervisor: Supervisor) -> None:
    supervisor.await_line("Ctrl-C stops every process", timeout=START_TIMEOUT_S)
    before = supervisor.status()
    assert [before[b]["health"] for b in ("1", "2", "zookeeper")] == ["healthy"] * 3
    assert sorted(before[b]["role"] for b in ("1", "2")) == ["-", "controller"]
    killed = int(before["2"]["pid"])

    os.kill(killed, signal.SIGKILL)
    died = supervisor.await_line(f"broker 2 (pid {killed}, port {before['2']['port']}) died: killed by SIGKILL")
    assert "broker-2.log" in died[-1]
    report = supervisor.await_line("restart it with: grete cluster restart 2")
    assert any("serving on" in line for line in report[:-1]), report  # its log's last lines
    assert supervisor.status()["2"]["health"] == "dead: killed by SIGKILL"

    restarted = supervisor.command("restart", "2")
    assert restarted.returncode == 0, restarted.stderr
    after = supervisor.status()
    assert [after[b]["health"] for b in ("1", "2", "zookeeper")] == ["healthy"] * 3
    assert after["2"]["pid"] != str(killed) and after["2"]["port"] == before["2"]["port"]
    # The restarted broker serves: a topic created through it takes writes on both brokers.
    topic = f"t-{uuid.uuid4().hex[:8]}"
    _wire.create_topic("127.0.0.1", int(after["2"]["port"]), topic, 2, {})
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{after['2']['port']}", "acks": "all"})
    delivered: list[object] = []
    for partition in (0, 1):
        producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None, None]

    pids = [int(after[name]["pid"]) for name in ("1", "2", "zookeeper")]
    supervisor.process.send_signal(signal.SIGINT)
    assert supervisor.process.wait(90) == 0
    assert [pid for pid in pids if _alive(pid)] == []
    assert not (supervisor.directory / "cluster.sock").exists()


def test_stop_one_broker_then_the_cluster(supervisor: Supervisor) -> None:
    supervisor.await_line("Ctrl-C stops every process", timeout=START_TIMEOUT_S)
    first = supervisor.status()
    stopped = supervisor.command("stop", "1")
    assert stopped.returncode == 0 and stopped.stdout == "broker 1 stopped\n", stopped
    status = supervisor.status()
    assert status["1"]["health"] == "stopped" and not _alive(int(first["1"]["pid"]))
    assert status["2"]["health"] == "healthy" and status["2"]["pid"] == first["2"]["pid"]
    assert not any("died" in line for line in supervisor.seen)  # an ordered stop is no death
    assert supervisor.command("restart", "3").returncode == 1  # no such broker
    stopping = supervisor.command("stop")
    assert stopping.returncode == 0 and stopping.stdout == "stopped every broker and ZooKeeper\n", stopping
    # Answered once all is down: a script may start a cluster in the same directory at once.
    assert not any(_alive(int(first[name]["pid"])) for name in ("2", "zookeeper"))
    assert not (supervisor.directory / "cluster.sock").exists()
    assert supervisor.process.wait(90) == 0
    assert supervisor.command("status").returncode == 1  # nothing answers any more


def test_a_kraft_cluster_by_default_controllers_watched_and_restarted(kraft_supervisor: Supervisor) -> None:
    """Three controllers and two brokers; the quorum's leader is SIGKILLed: reported, another leads,
    the brokers stay healthy and take writes; ``restart`` brings the controller back as a voter."""
    supervisor = kraft_supervisor
    banner = supervisor.await_line("Ctrl-C stops every process", timeout=START_TIMEOUT_S)
    assert any(line.startswith("controllers (KRaft") for line in banner), banner
    before = supervisor.status()
    assert [before[b]["health"] for b in ("1", "2", "1001", "1002", "1003")] == ["healthy"] * 5
    assert sorted(before[c]["role"] for c in ("1001", "1002", "1003")) == ["leader", "voter", "voter"]
    leader = next(c for c in ("1001", "1002", "1003") if before[c]["role"] == "leader")
    os.kill(int(before[leader]["pid"]), signal.SIGKILL)
    supervisor.await_line(f"controller {leader} (pid {before[leader]['pid']}, port {before[leader]['port']}) died")
    supervisor.await_line(f"restart it with: grete cluster restart {leader}")
    _create_and_write(int(before["1"]["port"]), int(before["2"]["port"]))  # through the new leader
    during = supervisor.status()
    assert during[leader]["health"] == "dead: killed by SIGKILL"
    assert [during[c]["role"] for c in ("1001", "1002", "1003") if c != leader].count("leader") == 1

    restarted = supervisor.command("restart", leader)
    assert restarted.returncode == 0, restarted.stderr
    after = supervisor.status()
    assert [after[b]["health"] for b in ("1", "2", "1001", "1002", "1003")] == ["healthy"] * 5
    pids = [int(after[name]["pid"]) for name in after]
    supervisor.process.send_signal(signal.SIGINT)
    assert supervisor.process.wait(90) == 0
    assert [pid for pid in pids if _alive(pid)] == []


@pytest.fixture
def combined_supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    yield from _supervised(Supervisor(tmp_path / "cluster", 3, "--combined"))


def test_combined_nodes_lead_the_quorum_in_turn_and_a_restarted_one_rejoins(combined_supervisor: Supervisor) -> None:
    """``--combined``: three brokers that are the quorum's voters, no controller processes; the one
    leading the quorum is SIGKILLed: reported, another leads and takes writes; ``restart`` brings it
    back healthy."""
    supervisor = combined_supervisor
    banner = supervisor.await_line("Ctrl-C stops every process", timeout=START_TIMEOUT_S)
    assert any(line.startswith("controllers (combined with the brokers") for line in banner), banner
    before = supervisor.status()
    assert sorted(before) == ["1", "2", "3"]
    assert [before[b]["health"] for b in "123"] == ["healthy"] * 3
    assert [before[b]["role"] for b in "123"].count("controller") == 1
    leader = next(b for b in "123" if before[b]["role"] == "controller")
    os.kill(int(before[leader]["pid"]), signal.SIGKILL)
    supervisor.await_line(f"broker {leader} (pid {before[leader]['pid']}, port {before[leader]['port']}) died")
    other = next(b for b in "123" if b != leader)
    # Created once the new leader has fenced the dead broker, so no replica is placed on it (Kafka's
    # placement has the same window, up to broker.session.timeout.ms there).
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{before[other]['port']}"})
    wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == {int(b) for b in "123"} - {int(leader)},
               60, f"broker {leader} fenced")
    _create_and_write(int(before[other]["port"]), int(before[other]["port"]))  # through the new leader
    during = supervisor.status()
    assert during[leader]["health"] == "dead: killed by SIGKILL"
    assert [during[b]["role"] for b in "123" if b != leader].count("controller") == 1

    restarted = supervisor.command("restart", leader)
    assert restarted.returncode == 0, restarted.stderr
    after = supervisor.status()
    assert [after[b]["health"] for b in "123"] == ["healthy"] * 3
    pids = [int(after[name]["pid"]) for name in after]
    supervisor.process.send_signal(signal.SIGINT)
    assert supervisor.process.wait(90) == 0
    assert [pid for pid in pids if _alive(pid)] == []


def _processes_under(directory: Path) -> list[int]:
    """Processes whose command line names ``directory`` (the brokers and controllers it runs)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(directory) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_broker_that_cannot_start_leaves_no_process_behind(tmp_path: Path) -> None:
    """Broker 2's port is taken: ``grete cluster`` reports it and exits 1, and the brokers launched
    beside it (broker 3 was started before broker 2 was waited for) and the controllers are stopped."""
    first = free_ports(3)
    directory = tmp_path / "cluster"
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 1))
        held.listen()
        done = subprocess.run([sys.executable, "-m", "grete.cli", "cluster", "--brokers", "3", "--controllers", "1",
                               "--port", str(first), "--dir", str(directory)],
                              capture_output=True, text=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "address already in use" in done.stderr
    assert _processes_under(directory) == []
