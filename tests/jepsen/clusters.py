"""The clusters under test: grete (grete.testing.cluster) or Apache Kafka 3.9.2 in ZooKeeper mode
(tools.reference_kafka_zk), three brokers, each reaching ZooKeeper through its own proxy
(tests/jepsen/proxy.py) so a broker can be cut off from ZooKeeper; or in KRaft mode, grete
(``grete-kraft``) or Apache Kafka 4.3.1 (``kafka-4.3``, tools.reference_kafka_kraft): three
controllers and three brokers, each broker reaching each controller through a proxy of its own (its
``controller.quorum.voters`` names them), so a broker can be cut off from the controllers."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grete.testing.cluster import GreteCluster, ZooKeeperProcess, free_port
from grete.testing.common import scratch_root
from grete.testing.kraft import ControllerQuorum
from grete.testing.process import serve_command
from tests.jepsen.netns import Network, own_hosts
from tests.jepsen.proxy import Proxy
from tools import kafka_dist

TARGETS = ("grete", "kafka-3.9", "grete-kraft", "kafka-4.3")
KRAFT_TARGETS = ("grete-kraft", "kafka-4.3")
SESSION_TIMEOUT_MS = 6000
CONTROLLERS = 3
# KRaft's session (broker.session.timeout.ms, a controller's setting: Kafka's default 9 s) as
# ZooKeeper's, so that the faults timed against it fit both.
KRAFT_CONTROLLER_OVERRIDES = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
# --snapshot-often (KRaft, controllers and brokers alike): a snapshot after every commit, the log
# start moved past older snapshots a second later, small segments; a node that falls behind (restarted,
# paused) is then sent to the leader's snapshot (FetchSnapshot).
SNAPSHOT_OFTEN = {"metadata.log.max.record.bytes.between.snapshots": "1", "metadata.max.retention.ms": "1000",
                  "internal.metadata.log.segment.bytes": "65536"}

# Both targets get the same broker settings (Kafka's names; grete reads the same ones).
OVERRIDES = {
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "auto.create.topics.enable": "false",
    # Leadership goes back to the preferred replica soon after a broker returns, as it would in
    # production after leader.imbalance.check.interval.seconds (300 s): more leader changes per round.
    "leader.imbalance.check.interval.seconds": "10",
    # A follower cut off by a network partition leaves the ISR within a round (Kafka: 30 s).
    "replica.lag.time.max.ms": "8000",
}


def controller_name(node_id: int) -> str:
    """The name a KRaft controller advertises its listener under (``_named``)."""
    return f"kraft-controller-{node_id}"


def _named(base: type) -> type:
    class Named(base):  # type: ignore[valid-type,misc]
        """Controllers named ``controller_name(id):port`` in their voters and advertised listener,
        each run with its own /etc/hosts naming them all at 127.0.0.1 (netns.own_hosts). A broker
        learns the leader's address from the quorum's answers (KIP-853's NodeEndpoints: a Kafka
        leader names its advertised listener, a grete one its voters entry) and connects there, not
        to the proxies it is configured with; its own /etc/hosts sends the names to its proxies."""

        @property
        def voters(self) -> str:
            return ",".join(f"{i}@{controller_name(i)}:{self.ports[i]}" for i in self.ids)

        def items(self, node_id: int) -> dict[str, str]:
            return {**super().items(node_id),
                    "advertised.listeners": f"CONTROLLER://{controller_name(node_id)}:{self.ports[node_id]}"}

        def launch_prefix(self, node_id: int) -> list[str]:
            return own_hosts(self.directory / f"controller-{node_id}.hosts",
                             {controller_name(c): "127.0.0.1" for c in self.ids})

    return Named


def _proxied(base: type, network: Network | None) -> type:
    class Proxied(base):  # type: ignore[valid-type,misc]
        """``zookeeper.connect`` of broker N is its own proxy to ZooKeeper; with a ``network``,
        broker N also runs in its own network namespace (tests/jepsen/netns.py). KRaft: broker N
        reaches controller C through its own proxy, listening on C's port at an address of broker
        N's (``controller_host``), where its own /etc/hosts resolves C's advertised name."""

        zk_proxies: dict[int, Proxy]
        controller_proxies: dict[int, dict[int, Proxy]]

        def launch_prefix(self, broker_id: int) -> list[str]:
            prefix = network.prefix(broker_id) if network is not None else []
            if self.zookeeper is None:
                names = {controller_name(c): self.controller_host(broker_id) for c in self.quorum.ids}
                prefix += own_hosts(Path(self.directory) / f"broker-{broker_id}.hosts", names)
            return prefix

        def host_of(self, broker_id: int) -> str:
            return network.address(broker_id) if network is not None else "127.0.0.1"

        def controller_host(self, broker_id: int) -> str:
            """Where broker N's proxies to the controllers listen: the root side of its veth with a
            network, else 127.0.N.1."""
            return network.root_address(broker_id) if network is not None else f"127.0.{broker_id}.1"

        def broker_items(self, broker_id: int) -> dict[str, str]:
            items: dict[str, str] = super().broker_items(broker_id)
            bind = network.root_address(broker_id) if network is not None else "127.0.0.1"
            if self.zookeeper is None:  # KRaft: a proxy to each controller
                if broker_id not in self.controller_proxies:  # made once: each holds its controller's port
                    host = self.controller_host(broker_id)
                    self.controller_proxies[broker_id] = {c: Proxy(port, bind_host=host, port=port)
                                                          for c, port in sorted(self.quorum.ports.items())}
                proxies = self.controller_proxies[broker_id]
                items["controller.quorum.voters"] = ",".join(f"{c}@{p.address}" for c, p in proxies.items())
                return items
            if broker_id not in self.zk_proxies:
                self.zk_proxies[broker_id] = Proxy(self.zookeeper.port, bind_host=bind)
            items["zookeeper.connect"] = self.zk_proxies[broker_id].address
            return items

    return Proxied


@contextmanager
def open_cluster(target: str, brokers: int = 3, overrides: Mapping[str, str] | None = None,
                 keep: bool = False, namespaces: bool = False, snapshot_often: bool = False) -> Iterator[Any]:
    """A running cluster of ``target`` with ``.zk_proxies[broker_id]`` (ZooKeeper) or
    ``.controller_proxies[broker_id][controller_id]`` (KRaft) and, with ``namespaces``,
    ``.network`` (each broker in its own network namespace, for partitions between brokers);
    ``snapshot_often`` (KRaft): SNAPSHOT_OFTEN on every controller and broker; removed on exit
    unless ``keep``."""
    if snapshot_often and target not in KRAFT_TARGETS:
        raise ValueError(f"snapshots of the metadata log are KRaft's (targets {KRAFT_TARGETS})")
    items = {**OVERRIDES, **(SNAPSHOT_OFTEN if snapshot_often else {}), **(overrides or {})}
    network = Network() if namespaces else None
    try:
        if network is not None:
            for broker_id in range(1, brokers + 1):
                network.add(broker_id)
        with _cluster(target, brokers, items, keep, network) as running:
            yield running
    finally:
        if network is not None:
            network.close()


@contextmanager
def _cluster(target: str, brokers: int, items: dict[str, str], keep: bool, network: Network | None) -> Iterator[Any]:
    # The KRaft controllers' settings: the session, and the snapshot ones if the brokers have them.
    controller_items = {**KRAFT_CONTROLLER_OVERRIDES, **{k: items[k] for k in SNAPSHOT_OFTEN if k in items}}
    kraft_items = {k: v for k, v in items.items() if not k.startswith("zookeeper.")}
    if target == "grete":
        scratch = Path(tempfile.mkdtemp(prefix="jepsen-grete-", dir=scratch_root()))
        zookeeper = ZooKeeperProcess(scratch)
        running = _proxied(GreteCluster, network)(scratch, zookeeper, items)
    elif target == "grete-kraft":
        scratch = Path(tempfile.mkdtemp(prefix="jepsen-grete-kraft-", dir=scratch_root()))
        zookeeper = None
        quorum = _named(ControllerQuorum)(scratch, CONTROLLERS, overrides=controller_items)
        running = _proxied(GreteCluster, network)(scratch, None, kraft_items, quorum=quorum)
    elif target == "kafka-4.3":
        from tools.reference_kafka_kraft import VERSION as KRAFT_VERSION
        from tools.reference_kafka_kraft import KafkaControllerQuorum, KafkaKraftCluster

        kafka_dist.fetch(KRAFT_VERSION)
        scratch = Path(tempfile.mkdtemp(prefix="jepsen-kafka-kraft-"))
        zookeeper = None
        quorum = _named(KafkaControllerQuorum)(scratch, CONTROLLERS, overrides=controller_items)
        running = _proxied(KafkaKraftCluster, network)(scratch, quorum, kraft_items)
    elif target == "kafka-3.9":
        from tools.reference_kafka_zk import VERSION, KafkaZkCluster

        kafka_dist.fetch(VERSION)
        scratch = Path(tempfile.mkdtemp(prefix="jepsen-kafka-"))
        zookeeper = ZooKeeperProcess(scratch)
        running = _proxied(KafkaZkCluster, network)(scratch, zookeeper, items, None, VERSION)
    else:
        raise ValueError(f"unknown target {target!r} (one of {TARGETS})")
    running.zk_proxies = {}
    running.controller_proxies = {}
    running.network = network
    try:
        if zookeeper is not None:
            zookeeper.start()
        else:
            running.quorum.start()
        for broker_id in range(1, brokers + 1):
            running.start_broker(broker_id)
        if hasattr(running, "await_metadata"):
            running.await_metadata()
        yield running
    finally:
        proxies = all_proxies(running)
        for proxy in proxies:
            proxy.heal()
        running.stop()
        for proxy in proxies:
            proxy.close()
        if not keep and not os.environ.get("GRETE_KEEP_TMP"):
            shutil.rmtree(scratch, ignore_errors=True)


def all_proxies(cluster: Any) -> list[Proxy]:
    """Every broker's proxies: to ZooKeeper, or one to each controller."""
    return [*cluster.zk_proxies.values(), *(p for per in cluster.controller_proxies.values() for p in per.values())]


def second_process_command(cluster: Any, broker_id: int) -> list[str]:
    """The command line of another broker process with the config of ``broker_id`` (its broker.id,
    its log dirs, its ZooKeeper proxy, its namespace), listening on a port of its own."""
    items = {**cluster.broker_items(broker_id), "listeners": f"PLAINTEXT://{cluster.host_of(broker_id)}:{free_port()}"}
    if isinstance(cluster, GreteCluster):
        return cluster.launch_prefix(broker_id) + serve_command(items)
    config = Path(cluster.directory) / f"broker-{broker_id}-second.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in items.items()))
    command: list[str] = cluster.broker_command(broker_id, config)
    return command
