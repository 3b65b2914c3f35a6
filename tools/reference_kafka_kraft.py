"""Apache Kafka 4.3.1 in KRaft mode: a quorum of Kafka controllers (``process.roles=controller``) and
Kafka brokers (``process.roles=broker``), the reference for grete's KRaft clusters.

    with kafka_kraft_cluster(3) as running:
        print(running.bootstrap_servers)       # the brokers
        print(running.quorum.leader())         # the active controller (DescribeQuorum)
        running.quorum.kill(running.quorum.leader())
        running.quorum.start_controller(...)   # back on its port and log dir, as a follower

The quorum is ``grete.testing.kraft.ControllerQuorum`` (ids 1001.., ports, cluster id, each
controller's settings, kill / pause / resume / DescribeQuorum) with Kafka controllers in it; the
brokers are ``tools.reference_kafka_zk.KafkaZkCluster``'s (``brokers[id]``, ``start_broker``,
``stop_broker``, ``kill_broker``, ...) configured as a KRaft cluster's. Every node's storage is
formatted once by Kafka's own ``kafka-storage format`` with the quorum's cluster id. A broker is
ready when its own Metadata lists it (Kafka lists unfenced brokers only) and a controller.

    python -m tools.reference_kafka_kraft [N]     # 3 controllers and N brokers until Ctrl-C
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from grete.broker.child_process import spawn
from grete.testing.common import BrokerStartError
from grete.testing.kraft import ControllerQuorum, write_properties
from grete.testing.process import BrokerProcess
from tools import kafka_dist
from tools.reference_kafka import port_open, wait_while
from tools.reference_kafka_zk import (
    HEAP,
    KafkaZkBroker,
    KafkaZkCluster,
    brokers_running,
    internal_topic_items,
    metadata_brokers,
)

VERSION = "4.3.1"
CONTROLLER_HEAP = "-Xmx256m"
START_TIMEOUT_S = 120.0  # six JVMs on two busy cores: a restarted controller took 33 s here
STARTED = "Kafka Server started"  # KafkaRaftServer's line once its controller or broker runs
# Fewer threads: six JVMs share two cores.
LIGHT = {"num.network.threads": "2", "num.io.threads": "2", "background.threads": "2"}


def format_storage(version: str, properties: Path, log_dir: str, cluster_id: str) -> None:
    """``kafka-storage format`` of a node's log dir, unless it was formatted before (a restart)."""
    if not (Path(log_dir) / "meta.properties").exists():
        kafka_dist.run_tool(version, "kafka-storage", "format", "-t", cluster_id, "-c", str(properties),
                            "--ignore-formatted", check=True)


class KafkaControllerQuorum(ControllerQuorum):
    """Kafka controllers in place of grete's (same ids, ports, settings and cluster id)."""

    def __init__(self, directory: Path, count: int = 3, overrides: Mapping[str, str] | None = None,
                 version: str = VERSION, heap: str = CONTROLLER_HEAP) -> None:
        super().__init__(directory, count, overrides={**LIGHT, **(overrides or {})})
        self.version = kafka_dist.resolve_version(version)
        self.heap = heap

    def _launch(self, node_id: int) -> tuple[subprocess.Popen[bytes], Path, int]:
        properties = self.directory / f"controller-{node_id}.properties"
        items = self.items(node_id)
        write_properties(properties, items)
        format_storage(self.version, properties, items["log.dirs"], self.cluster_id)
        log_path = self.log_path(node_id)
        skip = log_path.stat().st_size if log_path.exists() else 0
        # C1 only (quick_start): a controller starts in about half the time and its work is light.
        command = kafka_dist.java_cmd(self.version, "kafka-server-start", str(properties), log_level="INFO",
                                      heap=self.heap, quick_start=True)
        return spawn(self.launch_prefix(node_id) + command, log_path), log_path, skip

    def _await_start(self, node_id: int, process: subprocess.Popen[bytes], log_path: Path, skip: int,
                     timeout: float) -> BrokerProcess:
        """Until its log says it started (at least START_TIMEOUT_S: a JVM's start, not grete's)."""
        deadline = time.monotonic() + max(timeout, START_TIMEOUT_S)
        while STARTED not in (text := log_path.read_text(errors="replace")[skip:]):
            if process.poll() is not None or time.monotonic() > deadline:
                raise BrokerStartError(f"Kafka controller {node_id} did not start (exit {process.poll()}):\n"
                                       + "\n".join(text.splitlines()[-40:]))
            time.sleep(0.2)
        return BrokerProcess(process, "127.0.0.1", self.ports[node_id], self.directory / f"controller-{node_id}",
                             log_path)


class KafkaKraftCluster(KafkaZkCluster):
    """Kafka brokers 1..N of ``quorum``'s cluster (``broker-<id>/`` data, ``broker-<id>.log``)."""

    kind = f"kafka-{VERSION}-kraft"

    def __init__(self, directory: Path, quorum: ControllerQuorum, overrides: Mapping[str, str] | None = None,
                 ports: Mapping[int, int] | None = None, version: str = VERSION, heap: str = HEAP) -> None:
        super().__init__(directory, None, overrides, ports, version, heap)
        self.quorum = quorum

    def coordination_items(self, broker_id: int) -> dict[str, str]:
        return {**self.quorum.broker_items(broker_id), "inter.broker.listener.name": "PLAINTEXT"}

    def registered(self) -> list[int]:
        """The brokers a running broker's Metadata lists (the unfenced ones)."""
        seen: set[int] = set()
        for broker in self.brokers.values():
            if broker.process.poll() is None and (found := metadata_brokers(broker.bootstrap_servers)) is not None:
                seen |= found[0]
        return sorted(seen)

    def prepare(self, broker_id: int, items: Mapping[str, str], config: Path) -> None:
        """A new broker's storage formatted; a restarted one registers again as soon as the controller
        lets it (a killed one's registration lives until its session ends: the broker retries)."""
        format_storage(self.version, config, items["log.dirs"], self.quorum.cluster_id)

    def ready(self, broker: KafkaZkBroker) -> bool:
        if not port_open(broker.host, broker.port):
            return False
        seen = metadata_brokers(broker.bootstrap_servers)
        return seen is not None and broker.broker_id in seen[0] and seen[1] >= 0

    def stop(self) -> None:
        super().stop()
        self.quorum.stop()


@contextmanager
def kafka_kraft_cluster(brokers: int = 3, *, directory: str | Path | None = None,
                        overrides: Mapping[str, str] | None = None,
                        controller_overrides: Mapping[str, str] | None = None,
                        keep: bool = False) -> Iterator[KafkaKraftCluster]:
    """Three Kafka controllers and ``brokers`` Kafka brokers (ids 1..N), stopped (and, unless
    ``keep``, a ``directory`` or $GRETE_KEEP_TMP, removed) on exit."""
    kafka_dist.fetch(VERSION)
    scratch = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="kafka-kraft-cluster-"))
    scratch.mkdir(parents=True, exist_ok=True)
    running = KafkaKraftCluster(scratch, KafkaControllerQuorum(scratch, overrides=controller_overrides),
                                internal_topic_items(brokers, overrides))
    with brokers_running(running, brokers, running.quorum.start, scratch, keep=keep or directory is not None):
        yield running


def _main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 3
    t0 = time.monotonic()
    with kafka_kraft_cluster(count) as running:
        print(f"Kafka {running.version} (KRaft), 3 controllers and {count} brokers in {time.monotonic() - t0:.1f}s\n"
              f"controllers: {running.quorum.voters}\nbootstrap servers: {running.bootstrap_servers}\n"
              f"data: {running.directory}; Ctrl-C stops it", flush=True)
        wait_while(lambda: any(b.process.poll() is None for b in running.brokers.values()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
