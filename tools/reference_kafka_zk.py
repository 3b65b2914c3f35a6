"""Apache Kafka 3.9.2 in ZooKeeper mode, N brokers: the oracle for grete's cluster mode.

    with kafka_zk_cluster(3) as running:
        print(running.bootstrap_servers)       # "127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>"
        print(running.zookeeper.connect)       # "127.0.0.1:<zk port>"
        running.stop_broker(2)                 # SIGTERM: controlled shutdown, as kafka-server-stop
        running.start_broker(2)                # back on the same port and log dir
        running.kill_broker(3)                 # SIGKILL: leaders move after the ZooKeeper session expires

ZooKeeper is Debian's (``grete.testing.cluster.ZooKeeperProcess``, the same one grete's clusters
use); each broker is ``kafka.Kafka server.properties`` from the jars of ``tools.kafka_dist``
(``-Xmx384m``, serial GC: four JVMs share two cores). The object offers what
``grete.testing.cluster.GreteCluster`` offers (``bootstrap_servers``, ``zookeeper.connect``,
``brokers[id]`` with ``host/port/bootstrap_servers/pid/process/log()``, ``start_broker``,
``stop_broker``, ``kill_broker``, ``pause_broker``, ``resume_broker``, ``registered()``), so one test
body runs against either. A broker is ready when it is registered in ``/brokers/ids`` and its own
Metadata answer lists every registered broker and a controller.

    python -m tools.reference_kafka_zk [N]     # a cluster until Ctrl-C
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from grete.testing.cluster import ZooKeeperProcess
from tools import kafka_dist
from tools.reference_kafka import _silent_logger, die_with_parent, free_port, port_open, wait_while

VERSION = "3.9.2"
HEAP = "-Xmx384m"
START_TIMEOUT_S = 90.0


class KafkaZkBroker:
    """One running Kafka broker JVM (the same attributes as grete.testing.process.BrokerProcess)."""

    def __init__(self, broker_id: int, process: subprocess.Popen[bytes], host: str, port: int,
                 data_dir: Path, log_path: Path) -> None:
        self.broker_id = broker_id
        self.process = process
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (Kafka's shutdown hook runs the controlled shutdown), then SIGKILL after
        ``timeout``. 0 for a clean stop: a JVM ended by SIGTERM exits 143 once its shutdown hooks
        have run, which is Kafka's normal way down, not a failure (grete's broker exits 0)."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(30)
                return self.process.returncode
            return 0 if self.process.returncode == 128 + signal.SIGTERM else self.process.returncode
        return self.process.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass


class KafkaZkCluster:
    """ZooKeeper plus Kafka brokers 1..N in ``directory`` (``broker-<id>/`` data, ``broker-<id>.log``)."""

    kind = f"kafka-{VERSION}-zk"

    def __init__(self, directory: Path, zookeeper: ZooKeeperProcess | None, overrides: Mapping[str, str] | None = None,
                 ports: Mapping[int, int] | None = None, version: str = VERSION, heap: str = HEAP) -> None:
        self.directory = directory
        self.zookeeper = zookeeper
        self.overrides = dict(overrides or {})
        self.ports = dict(ports or {})
        self.version = kafka_dist.resolve_version(version)
        self.heap = heap
        self.brokers: dict[int, KafkaZkBroker] = {}
        self.startup_seconds: dict[int, float] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for _, b in sorted(self.brokers.items()) if b.process.poll() is None)

    def launch_prefix(self, broker_id: int) -> list[str]:
        """What a broker's command runs under (tests/jepsen runs each in a network namespace)."""
        return []

    def host_of(self, broker_id: int) -> str:
        return "127.0.0.1"

    def broker_items(self, broker_id: int) -> dict[str, str]:
        port = self.ports.setdefault(broker_id, free_port())
        items = {
            **self.coordination_items(broker_id),
            "listeners": f"PLAINTEXT://{self.host_of(broker_id)}:{port}",
            "log.dirs": str(self.directory / f"broker-{broker_id}"),
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "group.initial.rebalance.delay.ms": "0",
            # Fewer threads: four JVMs share two cores.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "background.threads": "2",
        }
        items.update(self.overrides)
        return items

    def coordination_items(self, broker_id: int) -> dict[str, str]:
        """What makes the broker one of this cluster: its id and ZooKeeper."""
        assert self.zookeeper is not None
        return {"broker.id": str(broker_id), "zookeeper.connect": self.zookeeper.connect,
                "zookeeper.session.timeout.ms": "6000", "controlled.shutdown.retry.backoff.ms": "500"}

    def zk_client(self) -> KazooClient:
        client = KazooClient(hosts=self.zookeeper.connect)
        client.start(10)
        return client

    def registered(self) -> list[int]:
        """The broker ids registered in ZooKeeper now."""
        client = self.zk_client()
        try:
            if not client.exists("/brokers/ids"):
                return []
            return sorted(int(c) for c in client.get_children("/brokers/ids"))
        finally:
            client.stop()
            client.close()

    def start_broker(self, broker_id: int, timeout: float = START_TIMEOUT_S) -> KafkaZkBroker:
        """Start (or restart) a broker on its port and log dir. Like Kafka's own start script this
        fails while an earlier registration of the id is alive, so wait for a killed one's session
        to expire first."""
        t0 = time.monotonic()
        items = self.broker_items(broker_id)
        config = self.directory / f"broker-{broker_id}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in items.items()))
        self.prepare(broker_id, items, config)
        log_path = self.directory / f"broker-{broker_id}.log"
        command = self.broker_command(broker_id, config)
        with open(log_path, "ab") as log:
            log.write(f"==== start broker {broker_id} ====\n".encode())
            log.flush()
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, cwd=self.directory, preexec_fn=die_with_parent)
        broker = KafkaZkBroker(broker_id, process, self.host_of(broker_id), self.ports[broker_id],
                               Path(items["log.dirs"]), log_path)
        self.brokers[broker_id] = broker
        try:
            self._await_broker(broker, t0 + timeout)
        except BaseException:
            broker.stop(10)
            raise
        self.startup_seconds[broker_id] = time.monotonic() - t0
        return broker

    def broker_command(self, broker_id: int, config: Path) -> list[str]:
        """The command line of a broker process with the properties file ``config``."""
        return self.launch_prefix(broker_id) + kafka_dist.java_cmd(
            self.version, "kafka-server-start", str(config), log_level="INFO", heap=self.heap, quick_start=False)

    def prepare(self, broker_id: int, items: Mapping[str, str], config: Path) -> None:
        """Before a start: a restarted broker waits until its earlier registration has gone."""
        if broker_id in self.brokers:
            deadline = time.monotonic() + int(items["zookeeper.session.timeout.ms"]) / 1000 + 10
            while broker_id in self.registered() and time.monotonic() < deadline:
                time.sleep(0.2)

    def ready(self, broker: KafkaZkBroker) -> bool:
        """Registered, and its Metadata lists every registered broker and a controller."""
        live = set(self.registered()) if port_open(broker.host, broker.port) else set()
        if broker.broker_id not in live:
            return False
        seen = metadata_brokers(broker.bootstrap_servers)
        return seen is not None and live <= seen[0] and seen[1] >= 0

    def _await_broker(self, broker: KafkaZkBroker, deadline: float) -> None:
        while True:
            if broker.process.poll() is not None:
                raise RuntimeError(f"Kafka broker {broker.broker_id} exited with {broker.process.returncode}:\n"
                                   + "\n".join(broker.log().splitlines()[-40:]))
            if self.ready(broker):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka broker {broker.broker_id} not ready:\n"
                                   + "\n".join(broker.log().splitlines()[-40:]))
            time.sleep(0.2)

    def await_metadata(self, timeout: float = 60.0) -> None:
        """Every running broker's Metadata lists every running broker and a controller."""
        deadline = time.monotonic() + timeout
        running = {i for i, b in self.brokers.items() if b.process.poll() is None}
        for broker_id in sorted(running):
            while True:
                seen = metadata_brokers(self.brokers[broker_id].bootstrap_servers)
                if seen is not None and seen[0] == running and seen[1] in running:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker {broker_id}'s metadata never listed {sorted(running)}: {seen}")
                time.sleep(0.2)

    def stop_broker(self, broker_id: int, timeout: float = 60.0) -> int:
        """SIGTERM: a controlled shutdown first, as ``kafka-server-stop`` does."""
        return self.brokers[broker_id].stop(timeout)

    def kill_broker(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        broker._signal(signal.SIGKILL)
        broker.process.wait(10)

    def pause_broker(self, broker_id: int) -> None:
        self.brokers[broker_id]._signal(signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self.brokers[broker_id]._signal(signal.SIGCONT)

    def stop(self) -> None:
        # All at once: a controlled shutdown of the last brokers waits on the others otherwise.
        running = [b for b in self.brokers.values() if b.process.poll() is None]
        for broker in running:
            broker._signal(signal.SIGCONT)
            broker._signal(signal.SIGTERM)
        for broker in running:
            broker.stop(30.0)
        if self.zookeeper is not None:
            self.zookeeper.stop()


def metadata_brokers(bootstrap: str, timeout: float = 3.0) -> tuple[set[int], int] | None:
    """(broker ids, controller id) in a librdkafka Metadata answer from ``bootstrap``, or None."""
    from confluent_kafka.admin import AdminClient

    logger: Any = _silent_logger()
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0, "logger": logger})
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:  # KafkaException while the broker comes up
        return None
    return set(md.brokers), md.controller_id


@contextmanager
def kafka_zk_cluster(brokers: int = 3, *, directory: str | Path | None = None,
                     overrides: Mapping[str, str] | None = None, ports: Mapping[int, int] | None = None,
                     version: str = VERSION, keep: bool = False) -> Iterator[KafkaZkCluster]:
    """ZooKeeper and ``brokers`` Kafka brokers (ids 1..N), stopped (and, unless ``keep``, a
    ``directory`` or $GRETE_KEEP_TMP, removed) on exit."""
    kafka_dist.fetch(version)
    scratch = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="kafka-zk-cluster-"))
    scratch.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperProcess(scratch)
    running = KafkaZkCluster(scratch, zookeeper, internal_topic_items(brokers, overrides), ports, version)
    with brokers_running(running, brokers, zookeeper.start, scratch, keep=keep or directory is not None):
        yield running


def internal_topic_items(brokers: int, overrides: Mapping[str, str] | None) -> dict[str, str]:
    """Broker settings: internal topics cannot have more replicas than there are brokers."""
    return {"offsets.topic.replication.factor": str(min(3, brokers)),
            "transaction.state.log.replication.factor": str(min(3, brokers)),
            "transaction.state.log.min.isr": str(min(2, brokers)), **(overrides or {})}


@contextmanager
def brokers_running(running: KafkaZkCluster, brokers: int, coordinator_start: Callable[[], None], scratch: Path,
                    *, keep: bool) -> Iterator[None]:
    """The coordination (ZooKeeper or a controller quorum) started, brokers 1..N started and seen in
    the metadata; on exit everything stopped and ``scratch`` removed unless kept (or $GRETE_KEEP_TMP)."""
    try:
        coordinator_start()
        for broker_id in range(1, brokers + 1):
            running.start_broker(broker_id)
        running.await_metadata()
        yield
    finally:
        running.stop()
        if not keep and not os.environ.get("GRETE_KEEP_TMP"):
            shutil.rmtree(scratch, ignore_errors=True)


def _main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 3
    t0 = time.monotonic()
    with kafka_zk_cluster(count) as running:
        print(f"Kafka {running.version} (ZooKeeper mode), {count} brokers in {time.monotonic() - t0:.1f}s\n"
              f"ZooKeeper: {running.zookeeper.connect}\nbootstrap servers: {running.bootstrap_servers}\n"
              f"data: {running.directory}; Ctrl-C stops it", flush=True)
        wait_while(lambda: any(b.process.poll() is None for b in running.brokers.values()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
