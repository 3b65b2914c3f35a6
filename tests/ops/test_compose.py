"""docker/compose.yaml, validated (not run: grete's ZooKeeper cluster mode is not there yet).

Each broker's environment goes through the image's entrypoint into a server.properties that grete
loads strictly (every key known, every value valid); ids, listeners, published ports, ZooKeeper and
the Prometheus targets must agree with each other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grete.broker.config import BrokerConfig, read_properties
from grete.broker.listeners import parse_listeners, security_protocol

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
