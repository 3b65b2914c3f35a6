"""KRaft controller quorums of several voters on this machine, grete's and Apache Kafka 4.3.1's, for
tests and benchmarks: each voter a process (``grete serve`` or Kafka's ``kafka-server-start``) with
``process.roles=controller`` and static ``controller.quorum.voters``, every voter's storage formatted
by Kafka's own ``kafka-storage format``; the quorum read through DescribeQuorum as Kafka's tools read it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from grete.broker.child_process import spawn
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.coordinator.metadata import new_topic_id
from grete.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from grete.protocol.records.batch import iter_batches
from grete.protocol.topics import METADATA_TOPIC
from grete.storage.files import uuid_to_kafka
from grete.testing.common import free_port
from tools import kafka_dist

KAFKA = "4.3.1"


@dataclass
class Voter:
    node_id: int
    kind: str  # "grete" or "kafka"
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    def properties(self, quorum: dict[str, str]) -> str:
        """``quorum``: controller.quorum.voters, or a dynamic quorum's controller.quorum.bootstrap.servers."""
        props = {"process.roles": "controller", "node.id": str(self.node_id),
                 "listeners": f"CONTROLLER://127.0.0.1:{self.port}", "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", **quorum,
                 "log.dirs": str(self.data), **self.extra}
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self) -> None:
        config = self.workdir / "controller.properties"
        if self.kind == "grete":
            self.process = spawn([sys.executable, "-m", "grete.cli", "serve", str(config)], self.log)
        else:
            self.process = spawn(kafka_dist.java_cmd(KAFKA, "kafka-server-start", str(config), log_level="INFO",
                                                     quick_start=False), self.log)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.process = None


@dataclass
class CombinedNode(Voter):
    """A node with ``process.roles=broker,controller``: a voter on ``port`` and a broker on
    ``broker_port``, as Kafka 4's combined mode runs one."""

    broker_port: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def properties(self, quorum: dict[str, str]) -> str:
        props = {"process.roles": "broker,controller", "node.id": str(self.node_id),
                 "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port},CONTROLLER://127.0.0.1:{self.port}",
                 "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port}",
                 "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                 **quorum, "log.dirs": str(self.data),
                 "group.initial.rebalance.delay.ms": "0", **self.extra}
        return "".join(f"{k}={v}\n" for k, v in props.items())


@dataclass
class Quorum:
    voters: dict[int, Voter]
    cluster_id: str = ""
    voters_line: str = ""  # controller.quorum.voters
    # A dynamic quorum's (KIP-853): the voters' addresses, and each voter's directory id.
    bootstrap_line: str = ""  # controller.quorum.bootstrap.servers
    directories: dict[int, str] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, str]:
        """How a node of this quorum's cluster names the quorum."""
        if self.bootstrap_line:
            return {"controller.quorum.bootstrap.servers": self.bootstrap_line}
        return {"controller.quorum.voters": self.voters_line}

    def describe(self, via: Voter) -> DescribeQuorumResponse.PartitionData | None:
        """The quorum as ``via`` answers DescribeQuorum (None when it cannot be asked)."""
        async def ask() -> DescribeQuorumResponse:
            peer = PeerConnection("127.0.0.1", via.port, "test", timeout_s=5)
            try:
                request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                    topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
                response: DescribeQuorumResponse = await peer.call(request, 2)
                return response
            finally:
                peer.close()
        try:
            response = asyncio.run(ask())
        except PeerError:
            return None
        if not response.topics or not response.topics[0].partitions:
            return None
        return response.topics[0].partitions[0]

    def leader_view(self, timeout: float = 60) -> DescribeQuorumResponse.PartitionData:
        """DescribeQuorum answered by the leader (the others answer NOT_LEADER_OR_FOLLOWER)."""
        view: DescribeQuorumResponse.PartitionData = wait_for(
            lambda: next((d for v in self.live() if (d := self.describe(v)) is not None
                          and d.error_code == 0 and d.leader_id == v.node_id), None),
            timeout, "a leader answering DescribeQuorum")
        return view

    def caught_up(self, timeout: float = 60, expected: set[int] | None = None) -> DescribeQuorumResponse.PartitionData:
        """The leader's view once every live voter (or ``expected``) has fetched up to its high watermark."""
        ids = expected if expected is not None else {v.node_id for v in self.live()}

        def ready() -> DescribeQuorumResponse.PartitionData | None:
            view = self.leader_view()
            ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
            return view if view.high_watermark > 0 and all(ends.get(i) == view.high_watermark for i in ids) else None
        view: DescribeQuorumResponse.PartitionData = wait_for(ready, timeout, f"voters {sorted(ids)} caught up")
        return view

    def live(self) -> list[Voter]:
        return [v for v in self.voters.values() if v.process is not None]

    def stop(self) -> None:
        for voter in self.voters.values():
            if voter.process is not None:
                voter.process.kill()
                voter.process.wait(30)


def wait_for(probe: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None and found is not False:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")



def start_quorum(kinds: list[str], workdir: Path, extra: Callable[[str], dict[str, str]] | None = None,
                 start: bool = True, combined: bool = False, dynamic: bool = False) -> Quorum:
    """Voters 1..n of the kinds given ("grete", "kafka"), formatted and (unless not ``start``)
    started, not yet waited for; with ``combined``, each also a broker (``CombinedNode``); with
    ``dynamic``, a dynamic quorum (KIP-853) as Kafka 4's docs start one: every voter formatted with
    ``--initial-controllers`` and configured with ``controller.quorum.bootstrap.servers``."""
    if "kafka" in kinds:
        kafka_dist.fetch(KAFKA)
    voters: dict[int, Voter] = {}
    for i, kind in enumerate(kinds):
        more = extra(kind) if extra is not None else {}
        voters[i + 1] = (CombinedNode(i + 1, kind, free_port(), workdir / f"node{i + 1}", extra=more,
                                      broker_port=free_port()) if combined
                         else Voter(i + 1, kind, free_port(), workdir / f"voter{i + 1}", extra=more))
    line = ",".join(f"{v.node_id}@127.0.0.1:{v.port}" for v in voters.values())
    cluster_id = uuid_to_kafka(new_topic_id())  # never starting with "-", as Kafka's Uuid.randomUuid
    quorum = Quorum(voters, cluster_id, line)
    if dynamic:
        quorum.bootstrap_line = ",".join(f"127.0.0.1:{v.port}" for v in voters.values())
        quorum.directories = {v: uuid_to_kafka(new_topic_id()) for v in voters}
    initial = ",".join(f"{v.node_id}@127.0.0.1:{v.port}:{d}" for v in voters.values()
                       if (d := quorum.directories.get(v.node_id)))
    for voter in voters.values():
        voter.workdir.mkdir(parents=True)
        config = voter.workdir / "controller.properties"
        config.write_text(voter.properties(quorum.config))
        # Kafka's own format step for every voter: grete reads what kafka-storage writes.
        flags = ["--initial-controllers", initial] if dynamic else []
        kafka_dist.run_tool(KAFKA, "kafka-storage", "format", "-t", cluster_id, "-c", str(config), *flags, check=True)
    for voter in voters.values():
        if start:
            voter.start()
    return quorum


def metadata_batches(voter: Voter, below: int) -> list[bytes]:
    """The voter's metadata log batches below ``below``, as bytes on disk."""
    return metadata_log_batches(voter.data, below)


def metadata_log_batches(data: Path, below: int) -> list[bytes]:
    """The metadata log batches below ``below`` in the log dir ``data``, as bytes on disk."""
    partition = data / f"{METADATA_TOPIC}-0"
    found: list[bytes] = []
    for segment in sorted(partition.glob("*.log")):
        found += [bytes(b.bytes_view()) for b in iter_batches(segment.read_bytes()) if b.base_offset < below]
    return found


@dataclass
class BrokerOfQuorum:
    """A broker (``process.roles=broker``) of a quorum's cluster, its data and log in ``workdir``."""

    node_id: int
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)
            self.process = None


class KafkaBroker(BrokerOfQuorum):
    """An Apache Kafka 4.3.1 broker."""

    def start(self) -> None:
        self.process = spawn(kafka_dist.java_cmd(KAFKA, "kafka-server-start", str(self.workdir / "broker.properties"),
                                                 log_level="INFO", quick_start=False), self.log)

    def started(self) -> bool:
        return self.log.exists() and "Kafka Server started" in self.log.read_text(errors="replace")


class GreteBroker(BrokerOfQuorum):
    """A grete broker."""

    def start(self) -> None:
        self.process = spawn([sys.executable, "-m", "grete.cli", "serve", str(self.workdir / "broker.properties")],
                             self.log)


def _formatted(broker: BrokerOfQuorum, quorum: Quorum, extra: dict[str, str]) -> None:
    """The broker's properties written and its storage formatted with the quorum's cluster id by
    Kafka's own format step (for a grete broker too: it reads what kafka-storage writes)."""
    broker.workdir.mkdir(parents=True)
    props = {"process.roles": "broker", "node.id": str(broker.node_id),
             "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
             "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
             "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
             **quorum.config, "log.dirs": str(broker.data),
             "group.initial.rebalance.delay.ms": "0", **extra}
    config = broker.workdir / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    kafka_dist.run_tool(KAFKA, "kafka-storage", "format", "-t", quorum.cluster_id, "-c", str(config), check=True)


def start_kafka_broker(quorum: Quorum, node_id: int, workdir: Path, extra: dict[str, str] | None = None,
                       start: bool = True) -> KafkaBroker:
    """A Kafka 4.3.1 broker registered with ``quorum``, formatted with its cluster id, and (unless
    not ``start``) started."""
    kafka_dist.fetch(KAFKA)
    broker = KafkaBroker(node_id, free_port(), workdir)
    _formatted(broker, quorum, {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                                "transaction.state.log.min.isr": "1", "num.network.threads": "2",
                                "num.io.threads": "2", "background.threads": "2", **(extra or {})})
    if start:
        broker.start()
    return broker


def start_grete_broker(quorum: Quorum, node_id: int, workdir: Path, extra: dict[str, str] | None = None) -> GreteBroker:
    """A grete broker of ``quorum``'s cluster, formatted, started."""
    broker = GreteBroker(node_id, free_port(), workdir)
    _formatted(broker, quorum, extra or {})
    broker.start()
    return broker


def produce(bootstrap: str, topic: str, first: int, count: int) -> list[bytes]:
    """``count`` values written by an idempotent acks=all producer, each acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    values = [b"v%d" % i for i in range(first, first + count)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    return values


def consume(bootstrap: str, topic: str, count: int, group: str = "reader") -> list[bytes]:
    """Up to ``count`` values read by a consumer of ``group`` from its committed offsets (or the start)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        value = message.value() if message is not None and message.error() is None else None
        if value is not None:
            got.append(value)
    consumer.close()
    return got
