"""A KRaft controller quorum of grete controllers on this machine, for ``grete cluster`` and tests:
``count`` processes with ``process.roles=controller`` and static ``controller.quorum.voters``, each
formatted by ``grete storage format`` with the cluster's id (kept in the cluster's directory, so
the same directory starts the same cluster again), and the settings that make a broker one of its
cluster (``broker_items``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from grete.broker import storage_tool
from grete.broker.child_process import spawn
from grete.coordinator.metadata import new_topic_id
from grete.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from grete.protocol.topics import METADATA_TOPIC
from grete.storage.files import uuid_to_kafka
from grete.testing import _wire
from grete.testing.common import BrokerStartError, free_port
from grete.testing.process import BrokerProcess, await_start

CONTROLLER_ID_BASE = 1000  # controllers are 1001.., so brokers keep the ids 1..N
START_TIMEOUT_S = 60.0
CLUSTER_ID_FILE = "cluster.id"
LISTENER = "CONTROLLER"


def format_storage(properties: Path, cluster_id: str) -> None:
    """``grete storage format --ignore-formatted`` of the node configured in ``properties``."""
    failed = storage_tool.format_ignoring_formatted(properties, cluster_id)
    if failed is not None:
        raise BrokerStartError(f"formatting {properties} failed: {failed}")


def write_properties(path: Path, items: Mapping[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in items.items()))


class ControllerQuorum:
    def __init__(self, directory: Path, count: int = 3, ports: Mapping[int, int] | None = None,
                 overrides: Mapping[str, str] | None = None) -> None:
        self.directory = directory
        self.ids = [CONTROLLER_ID_BASE + n for n in range(1, count + 1)]
        self.ports = dict(ports or {})
        for node_id in self.ids:
            self.ports.setdefault(node_id, free_port())
        self.overrides = dict(overrides or {})
        self.controllers: dict[int, BrokerProcess] = {}
        self.cluster_id = self._cluster_id()

    def _cluster_id(self) -> str:
        path = self.directory / CLUSTER_ID_FILE
        if path.exists():
            return path.read_text().strip()
        cluster_id = uuid_to_kafka(new_topic_id())  # never starting with "-", as Kafka's Uuid.randomUuid
        path.write_text(cluster_id + "\n")
        return cluster_id

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``."""
        return ",".join(f"{i}@127.0.0.1:{self.ports[i]}" for i in self.ids)

    def log_path(self, node_id: int) -> Path:
        return self.directory / f"controller-{node_id}.log"

    def items(self, node_id: int) -> dict[str, str]:
        return {"process.roles": "controller", "node.id": str(node_id),
                "listeners": f"{LISTENER}://127.0.0.1:{self.ports[node_id]}", "controller.listener.names": LISTENER,
                "listener.security.protocol.map": f"{LISTENER}:PLAINTEXT", "controller.quorum.voters": self.voters,
                "log.dirs": str(self.directory / f"controller-{node_id}"), **self.overrides}

    def broker_items(self, broker_id: int) -> dict[str, str]:
        """What makes a broker one of this quorum's cluster (its log dir is formatted by ``start_broker``)."""
        return {"process.roles": "broker", "node.id": str(broker_id), "controller.listener.names": LISTENER,
                "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                                  f"SASL_SSL:SASL_SSL,{LISTENER}:PLAINTEXT",
                "controller.quorum.voters": self.voters}

    # --- processes -------------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Every controller started side by side (formatted first if new), then until one leads."""
        launched = [(node_id, *self._launch(node_id)) for node_id in self.ids]
        for node_id, process, log_path, skip in launched:
            self.controllers[node_id] = self._started(node_id, process, log_path, skip, timeout)
        self.await_leader(timeout)

    def start_controller(self, node_id: int, timeout: float = START_TIMEOUT_S, *, wait_leader: bool = True) -> None:
        process, log_path, skip = self._launch(node_id)
        self.controllers[node_id] = self._started(node_id, process, log_path, skip, timeout)
        if wait_leader:
            self.await_leader(timeout)

    def _launch(self, node_id: int) -> tuple[subprocess.Popen[bytes], Path, int]:
        properties = self.directory / f"controller-{node_id}.properties"
        write_properties(properties, self.items(node_id))
        format_storage(properties, self.cluster_id)
        log_path = self.log_path(node_id)
        skip = log_path.stat().st_size if log_path.exists() else 0
        return spawn(self.launch_prefix(node_id) + storage_serve(properties), log_path), log_path, skip

    def launch_prefix(self, node_id: int) -> list[str]:
        """What a controller's command runs under (tests/jepsen gives each its own /etc/hosts)."""
        return []

    def _started(self, node_id: int, process: subprocess.Popen[bytes], log_path: Path, skip: int,
                 timeout: float) -> BrokerProcess:
        """``_await_start``; a controller that does not start in time is killed (it would hold its
        log dir's lock against the next start)."""
        try:
            return self._await_start(node_id, process, log_path, skip, timeout)
        except BaseException:
            if process.poll() is None:
                process.kill()
                process.wait(30)
            raise

    def _await_start(self, node_id: int, process: subprocess.Popen[bytes], log_path: Path, skip: int,
                     timeout: float) -> BrokerProcess:
        """Until the controller launched by ``_launch`` serves (its log after ``skip`` says so)."""
        return await_start(process, self.directory / f"controller-{node_id}", log_path, timeout, skip)

    def running(self) -> dict[int, BrokerProcess]:
        return {i: c for i, c in self.controllers.items() if c.process.poll() is None}

    def addresses(self) -> list[tuple[str, int]]:
        """Where the running voters answer the quorum's requests."""
        return [(c.host, c.port) for c in self.running().values()]

    def leader(self) -> int:
        """The quorum's leader as a running controller answers DescribeQuorum; -1 when none knows."""
        for host, port in self.addresses():
            try:
                answer = _wire.call(host, port, _describe_quorum(), DescribeQuorumResponse, 2, timeout=2)
            except OSError:
                continue
            partitions = answer.topics[0].partitions if answer.topics else []
            if partitions and partitions[0].error_code == 0 and partitions[0].leader_id >= 0:
                return int(partitions[0].leader_id)
        return -1

    def await_leader(self, timeout: float = START_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while (leader := self.leader()) < 0:
            if time.monotonic() > deadline:
                raise BrokerStartError(f"no controller of {self.ids} leads the quorum after {timeout} s")
            time.sleep(0.05)
        return leader

    def kill(self, node_id: int) -> None:
        process = self.controllers[node_id].process
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def pause(self, node_id: int) -> None:
        self.controllers[node_id].process.send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.controllers[node_id].process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for controller in self.controllers.values():
            if controller.process.poll() is None:
                controller.process.send_signal(signal.SIGCONT)
                controller.stop(30.0)


class CombinedQuorum(ControllerQuorum):
    """The quorum of a cluster of combined nodes (``grete cluster --combined``): brokers 1..N are its
    voters (``process.roles=broker,controller``), each with a controller listener on a port of its
    own; there are no controller processes (``controllers`` stays empty)."""

    def __init__(self, directory: Path, count: int = 3, ports: Mapping[int, int] | None = None) -> None:
        super().__init__(directory, 0, ports)
        self.ids = list(range(1, count + 1))
        for node_id in self.ids:
            self.ports.setdefault(node_id, free_port())

    def broker_items(self, broker_id: int) -> dict[str, str]:
        return {**super().broker_items(broker_id), "process.roles": "broker,controller",
                "inter.broker.listener.name": "PLAINTEXT"}

    def controller_listener(self, broker_id: int) -> str:
        return f"{LISTENER}://127.0.0.1:{self.ports[broker_id]}"

    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.ports[node_id]) for node_id in self.ids]

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """The voters start as the cluster's brokers."""


def storage_serve(properties: Path) -> list[str]:
    return [sys.executable, "-m", "grete.cli", "serve", str(properties)]


def _describe_quorum() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
