"""A local ZooKeeper cluster of grete brokers, for users (``grete cluster``) and tests alike.

ZooKeeper is Debian's ``zookeeper`` package started as a plain ``java`` process (no service, no
``zkServer.sh``, whose environment file forces system paths) on a free port with its own data dir;
each broker is ``grete serve`` in its own process with ``zookeeper.connect`` and ``broker.id`` set,
listening on a port it binds itself (or one given). Brokers can be stopped, killed, paused and
started again by id, which is what failover tests need.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient

from grete.broker.child_process import spawn
from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from grete.testing.common import BrokerStartError, free_port, scratch_root
from grete.testing.kraft import CombinedQuorum, ControllerQuorum, format_storage, write_properties
from grete.testing.process import BrokerProcess, await_start, serve_command

ZOOKEEPER_JAR = Path(os.environ.get("GRETE_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 60.0


class ZooKeeperUnavailable(RuntimeError):
    """Debian's zookeeper package (or java) is not installed: ./scripts/install-test-deps installs it."""


def zookeeper_available() -> str | None:
    """None if ZooKeeper can be started here, else why not."""
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (apt-get install zookeeper; ./scripts/install-test-deps does it)"
    if shutil.which("java") is None:
        return "java is not installed"
    return None


class ZooKeeperProcess:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        missing = zookeeper_available()
        if missing:
            raise ZooKeeperUnavailable(missing)
        data = self.directory / "zookeeper-data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text("\n".join([
            "tickTime=2000", f"dataDir={data}", f"clientPort={self.port}", "clientPortAddress=127.0.0.1",
            "admin.enableServer=false", "4lw.commands.whitelist=ruok,srvr,stat,mntr", "maxClientCnxns=0",
            "initLimit=10", "syncLimit=5", ""]))
        command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false",
                   "-cp", str(ZOOKEEPER_JAR), ZOOKEEPER_MAIN, str(config)]
        self.process = spawn(command, self.log_path)
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                raise BrokerStartError(f"ZooKeeper exited with code {self.process.returncode}: "
                                       + self.log_path.read_text(errors="replace")[-2000:])
            if time.monotonic() > deadline:
                raise BrokerStartError(f"ZooKeeper did not answer on {self.connect} within {timeout} s")
            time.sleep(0.05)

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class GreteCluster:
    """Brokers 1..N (``brokers[id]``), each broker's data in ``<dir>/broker-<id>``, coordinated by
    ZooKeeper (``zookeeper``) or by a KRaft controller quorum of grete controllers (``quorum``)."""

    def __init__(self, directory: Path, zookeeper: ZooKeeperProcess | None,
                 overrides: Mapping[str, str] | None = None, ports: Mapping[int, int] | None = None,
                 broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
                 quorum: ControllerQuorum | None = None) -> None:
        assert (zookeeper is None) != (quorum is None), "ZooKeeper or a controller quorum"
        self.directory = directory
        self.zookeeper = zookeeper
        self.quorum = quorum
        self.overrides = dict(overrides or {})
        self.broker_overrides = {b: dict(o) for b, o in (broker_overrides or {}).items()}
        self.ports = dict(ports or {})
        self.brokers: dict[int, BrokerProcess] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for _, b in sorted(self.brokers.items()) if b.process.poll() is None)

    def launch_prefix(self, broker_id: int) -> list[str]:
        """What a broker's command runs under (tests/jepsen runs each in a network namespace)."""
        return []

    def host_of(self, broker_id: int) -> str:
        return "127.0.0.1"

    def broker_items(self, broker_id: int) -> dict[str, str]:
        # Chosen here, not by the broker's bind(0): a restarted broker binds its port again, and a
        # kernel-chosen port may meanwhile be any outgoing connection's (free_port avoids those).
        if broker_id not in self.ports:
            self.ports[broker_id] = free_port()
        port = self.ports[broker_id]
        items = {
            "listeners": f"PLAINTEXT://{self.host_of(broker_id)}:{port}",
            "log.dirs": str(self.directory / f"broker-{broker_id}"),
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.zookeeper is not None:
            items.update({
                "broker.id": str(broker_id),
                "zookeeper.connect": self.zookeeper.connect,
                # Quick failure detection for local clusters (Kafka's default is 18 s).
                "zookeeper.session.timeout.ms": "6000",
                "controlled.shutdown.retry.backoff.ms": "500",
            })
        else:
            assert self.quorum is not None
            items.update(self.quorum.broker_items(broker_id))
            if isinstance(self.quorum, CombinedQuorum):  # the node is a voter too
                items["listeners"] += "," + self.quorum.controller_listener(broker_id)
        items.update(self.overrides)
        items.update(self.broker_overrides.get(broker_id, {}))
        return items

    def registered(self) -> list[int]:
        """The broker ids registered in ZooKeeper now."""
        assert self.zookeeper is not None
        client = KazooClient(hosts=self.zookeeper.connect)
        client.start(10)
        try:
            return sorted(int(c) for c in client.get_children("/brokers/ids"))
        finally:
            client.stop()
            client.close()

    def start_broker(self, broker_id: int, timeout: float = START_TIMEOUT_S, *,
                     wait_metadata: bool = True) -> BrokerProcess:
        """Start (or restart) a broker. A killed broker's registration lives until its session
        expires, and a broker cannot register over it (Kafka's rule too): wait for that first."""
        return self.start_brokers([broker_id], timeout, wait_metadata=wait_metadata)[0]

    def start_brokers(self, broker_ids: list[int], timeout: float = START_TIMEOUT_S, *,
                      wait_metadata: bool = True) -> list[BrokerProcess]:
        """Start the brokers side by side (each launched before any is waited for)."""
        launched = [self._launch(broker_id) for broker_id in broker_ids]
        started = []
        try:
            for broker_id, (process, data_dir, log_path, skip) in zip(broker_ids, launched, strict=True):
                running = await_start(process, data_dir, log_path, timeout, skip)
                self.brokers[broker_id] = running
                started.append(running)
        except BaseException:
            # One failed to start: those launched beside it and not yet waited for are nobody's to
            # stop later (stop() knows only the started ones), so they stop here.
            for process, data_dir, log_path, _ in launched[len(started):]:
                BrokerProcess(process, "", 0, data_dir, log_path).stop()
            raise
        if wait_metadata:
            self.await_metadata()
        return started

    def _launch(self, broker_id: int) -> tuple[subprocess.Popen[bytes], Path, Path, int]:
        items = self.broker_items(broker_id)
        if self.quorum is not None:
            properties = self.directory / f"broker-{broker_id}.properties"
            write_properties(properties, items)
            format_storage(properties, self.quorum.cluster_id)
        elif broker_id in self.brokers:
            deadline = time.monotonic() + int(items["zookeeper.session.timeout.ms"]) / 1000 + 10
            while broker_id in self.registered() and time.monotonic() < deadline:
                time.sleep(0.2)
        log_path = self.directory / f"broker-{broker_id}.log"
        skip = log_path.stat().st_size if log_path.exists() else 0
        process = spawn(self.launch_prefix(broker_id) + serve_command(items), log_path)
        return process, Path(items["log.dirs"]), log_path, skip

    def await_metadata(self, timeout: float = 30.0) -> None:
        """Until every running broker's Metadata lists every running broker and a controller: a
        broker serves as soon as it has registered, but learns the cluster only from the
        controller's UpdateMetadata a moment later (clients asking it before then would wait for
        their next metadata refresh)."""
        deadline = time.monotonic() + timeout
        running = {i: b for i, b in self.brokers.items() if b.process.poll() is None and not _stopped(b.process.pid)}
        while True:
            if all(self._metadata_complete(b, set(running)) for b in running.values()):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(f"brokers {sorted(running)} do not all see each other and a controller")
            time.sleep(0.05)

    @staticmethod
    def _metadata_complete(broker: BrokerProcess, running: set[int]) -> bool:
        try:
            answer = _wire.call(broker.host, broker.port, MetadataRequest(topics=[]), MetadataResponse, 9, timeout=5)
        except OSError:
            return False
        listed = {b.node_id for b in answer.brokers}
        return running <= listed and answer.controller_id in listed

    def stop_broker(self, broker_id: int, timeout: float = 60.0) -> int:
        """SIGTERM (a controlled shutdown first), as ``kafka-server-stop`` does."""
        return self.brokers[broker_id].stop(timeout)

    def kill_broker(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def pause_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].process.send_signal(signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for broker_id in sorted(self.brokers, reverse=True):
            process = self.brokers[broker_id].process
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                self.brokers[broker_id].stop(30.0)
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.quorum is not None:
            self.quorum.stop()


def _stopped(pid: int) -> bool:
    """Whether the process is paused (SIGSTOP): such a broker answers nothing until resumed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


@contextmanager
def cluster(brokers: int = 3, *, directory: str | Path | None = None, overrides: Mapping[str, str] | None = None,
            ports: Mapping[int, int] | None = None, zookeeper_port: int | None = None,
            keep: bool = False,
            broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
            controllers: int = 0, controller_ports: Mapping[int, int] | None = None,
            combined: bool = False, controller_overrides: Mapping[str, str] | None = None) -> Iterator[GreteCluster]:
    """``brokers`` grete brokers (ids 1..N) and ZooKeeper, or with ``controllers`` a KRaft quorum of
    that many grete controllers (ids 1001..), or with ``combined`` brokers that are the quorum's voters
    themselves (``controller_ports`` by broker id then); stopped (and, unless ``keep`` or a ``directory`` was
    given, removed) on exit. ``broker_overrides``: properties of single brokers (e.g.
    ``{1: {"broker.rack": "a"}}``); ``controller_overrides``: properties of every controller."""
    scratch = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="grete-cluster-",
                                                                                  dir=scratch_root()))
    scratch.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperProcess(scratch, zookeeper_port) if not controllers and not combined else None
    quorum = (CombinedQuorum(scratch, brokers, controller_ports) if combined
              else ControllerQuorum(scratch, controllers, controller_ports, controller_overrides) if controllers
              else None)
    running = GreteCluster(scratch, zookeeper, overrides, ports, broker_overrides, quorum)
    try:
        if zookeeper is not None:
            zookeeper.start()
        if quorum is not None:
            quorum.start()
        if quorum is not None:  # side by side: nothing in a KRaft cluster depends on who starts first
            running.start_brokers(list(range(1, brokers + 1)))
        else:  # the first broker alone, so it becomes the controller; then the others side by side
            running.start_broker(1, wait_metadata=False)
            running.start_brokers(list(range(2, brokers + 1)), wait_metadata=False)
            running.await_metadata()
        yield running
    finally:
        running.stop()
        if directory is None and not keep:
            shutil.rmtree(scratch, ignore_errors=True)

