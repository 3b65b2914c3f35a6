"""docker/compose.yaml, validated, and its brokers run as a cluster outside containers.

Each broker's environment goes through the image's entrypoint into a server.properties that grete
loads strictly (every key known, every value valid); ids, listeners, published ports, ZooKeeper and
the Prometheus targets must agree with each other."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from grete.broker.child_process import spawn
from grete.broker.config import BrokerConfig, read_properties
from grete.broker.network.listeners import parse_listeners, security_protocol
from grete.testing.cluster import ZooKeeperProcess, zookeeper_available
from grete.testing.common import free_port
from grete.testing.process import await_start

from ._support import DOCKER, entrypoint

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the compose file")

ep = entrypoint()
COMPOSE = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
SERVICES = COMPOSE["services"]
BROKERS = sorted(name for name in SERVICES if name.startswith("grete-"))


def _config(service: str, tmp_path: Path) -> BrokerConfig:
    environ = {k: str(v) for k, v in SERVICES[service]["environment"].items()}
    notes: list[str] = []
    path = tmp_path / f"{service}.properties"
    path.write_text(ep.render(environ, [], notes))
    assert notes == []
    return BrokerConfig(read_properties(path), strict=True)


def test_top_level_shape():
    assert set(COMPOSE) <= {"services", "volumes", "networks", "configs", "secrets", "name"} | {
        k for k in COMPOSE if k.startswith("x-")}
    assert len(BROKERS) == 3 and "zookeeper" in SERVICES
    for name, service in SERVICES.items():
        assert "image" in service, name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith("./") or source in COMPOSE["volumes"], (name, volume)


def test_brokers_are_three_distinct_nodes_on_one_zookeeper(tmp_path):
    ids, external_ports = set(), set()
    for name in BROKERS:
        service = SERVICES[name]
        config = _config(name, tmp_path)
        ids.add(config.node_id)
        zk_host, zk_port = config.get_str("zookeeper.connect").split(":")
        assert zk_host == "zookeeper" and zk_port == "2181"
        assert "zookeeper" in service["depends_on"]
        advertised = {x.name: x for x in parse_listeners(config.get_list("advertised.listeners"))}
        bound = {x.name: x for x in parse_listeners(config.get_list("listeners"))}
        assert advertised.keys() == bound.keys() == {"INTERNAL", "EXTERNAL"}
        for listener in bound:
            security_protocol(config, listener)  # named in the protocol map, and served by grete
            assert bound[listener].port == advertised[listener].port
        assert advertised["INTERNAL"].host == name == service["hostname"]
        assert config.get_str("inter.broker.listener.name") == "INTERNAL"
        external = advertised["EXTERNAL"].port
        assert service["ports"] == [f"{external}:{external}"]
        external_ports.add(external)
        assert service["volumes"] == [f"{name}-data:/var/lib/grete"]
        assert config.log_dirs == [Path("/var/lib/grete/data")]
        assert config.get_int("offsets.topic.replication.factor") <= len(BROKERS)
        assert config.get_int("transaction.state.log.min.isr") <= config.get_int(
            "transaction.state.log.replication.factor") <= len(BROKERS)
    assert ids == {1, 2, 3}
    assert len(external_ports) == 3


def test_prometheus_is_optional_and_scrapes_every_broker(tmp_path):
    prometheus = SERVICES["prometheus"]
    assert prometheus["profiles"] == ["metrics"]
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text(encoding="utf-8"))
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = set()
    for name in BROKERS:
        url = _config(name, tmp_path).get_str("metrics.listener")
        port = re.fullmatch(r"http://[^:]*:(\d+)", url)
        assert port is not None, url
        expected.add(f"{name}:{port.group(1)}")
    assert targets == expected


@pytest.mark.slow
def test_compose_brokers_run_as_a_cluster(tmp_path):
    """The compose file's three brokers, as its environment configures them (through the image's
    entrypoint), run as one cluster on Debian's ZooKeeper, outside containers: only hosts, ports
    and the data dir are replaced by this machine's. RF 3 with min.insync.replicas 2 as configured."""
    if zookeeper_available():
        pytest.skip(zookeeper_available())
    zookeeper = ZooKeeperProcess(tmp_path)
    zookeeper.start()
    processes = []
    try:
        ports = {(b, name): free_port() for b in BROKERS for name in ("INTERNAL", "EXTERNAL")}
        hosts = {b: "127.0.0.1" for b in BROKERS}
        bootstrap = []
        for service in BROKERS:
            environ = {k: str(v) for k, v in SERVICES[service]["environment"].items()}
            environ["KAFKA_ZOOKEEPER_CONNECT"] = zookeeper.connect
            for key in ("KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS"):
                environ[key] = ",".join(
                    f"{name}://{'' if key == 'KAFKA_LISTENERS' else hosts[service]}:{ports[(service, name)]}"
                    for name in ("INTERNAL", "EXTERNAL"))
            environ.pop("KAFKA_METRICS_LISTENER", None)  # one port per broker would be needed
            config = tmp_path / f"{service}.properties"
            config.write_text(ep.render(environ, [], []) + f"log.dirs={tmp_path / service}\n")
            log_path = tmp_path / f"{service}.log"
            process = spawn([sys.executable, "-m", "grete.cli", "serve", str(config)], log_path)
            processes.append(process)
            await_start(process, tmp_path / service, log_path, 60)
            bootstrap.append(f"127.0.0.1:{ports[(service, 'EXTERNAL')]}")
        servers = ",".join(bootstrap)
        admin = AdminClient({"bootstrap.servers": servers})
        # The last broker is known once the controller's UpdateMetadata reaches the one asked,
        # which may be just after it registered (Kafka propagates metadata the same way).
        deadline = time.monotonic() + 30
        while sorted(admin.list_topics(timeout=10).brokers) != [1, 2, 3] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
        admin.create_topics([NewTopic("compose", 3)])["compose"].result(30)  # default RF 3 from compose
        described = admin.list_topics("compose", timeout=10).topics["compose"].partitions
        assert all(len(p.replicas) == 3 for p in described.values())
        producer = Producer({"bootstrap.servers": servers, "acks": "all"})
        for i in range(30):
            producer.produce("compose", value=f"v{i}".encode())
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": servers, "group.id": "compose", "auto.offset.reset": "earliest"})
        consumer.subscribe(["compose"])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < 30 and time.monotonic() < deadline:
            seen |= {m.value() for m in consumer.consume(100, 0.5) if m.error() is None}
        consumer.close()
        assert len(seen) == 30
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)
        zookeeper.stop()
