"""``grete host``'s layout of one broker's properties onto N brokers of a host: ids, ports, log
dirs, rack and request memory, and the properties it refuses."""

from __future__ import annotations

import pytest

from grete.broker.host_layout import HostFacts, HostLayoutError, broker_count, lay_out

FACTS = HostFacts(hostname="h1.example", cores=4, memory_bytes=16 << 30)
KRAFT = {"process.roles": "broker", "node.id": "10", "controller.quorum.bootstrap.servers": "c1:9093",
         "controller.listener.names": "CONTROLLER",
         "listeners": "PLAINTEXT://:9092,SSL://:9093",
         "advertised.listeners": "PLAINTEXT://h1.example:9092,SSL://h1.example:9093",
         "log.dirs": "/data/a"}


def test_each_broker_its_id_ports_dir_and_the_hosts_rack() -> None:
    brokers = lay_out(KRAFT, 3, FACTS)
    assert [b["node.id"] for b in brokers] == ["10", "11", "12"]
    assert [b["listeners"] for b in brokers] == [
        "PLAINTEXT://:9092,SSL://:9093", "PLAINTEXT://:9094,SSL://:9095", "PLAINTEXT://:9096,SSL://:9097"]
    assert brokers[2]["advertised.listeners"] == "PLAINTEXT://h1.example:9096,SSL://h1.example:9097"
    assert [b["log.dirs"] for b in brokers] == ["/data/a/broker-10", "/data/a/broker-11", "/data/a/broker-12"]
    assert {b["broker.rack"] for b in brokers} == {"h1.example"}
    # a quarter of 16 GiB among 3 brokers, the rest left to the page cache they share
    assert {b["queued.max.request.bytes"] for b in brokers} == {str((16 << 30) // 4 // 3)}
    assert all(b["controller.quorum.bootstrap.servers"] == "c1:9093" for b in brokers)


def test_enough_disks_are_shared_out_whole() -> None:
    brokers = lay_out({**KRAFT, "log.dirs": "/d1,/d2/,/d3,/d4"}, 2, FACTS)
    assert [b["log.dirs"] for b in brokers] == ["/d1,/d3", "/d2,/d4"]
    fewer = lay_out({**KRAFT, "log.dirs": "/d1,/d2"}, 3, FACTS)
    assert [b["log.dirs"] for b in fewer] == ["/d1/broker-10", "/d2/broker-11", "/d1/broker-12"]


def test_what_the_file_sets_itself_is_kept() -> None:
    mine = {**KRAFT, "broker.rack": "row-7", "queued.max.request.bytes": "1000000",
            "metadata.log.dir": "/meta/"}
    brokers = lay_out(mine, 2, FACTS, port_stride=100)
    assert {b["broker.rack"] for b in brokers} == {"row-7"}
    assert {b["queued.max.request.bytes"] for b in brokers} == {"1000000"}
    assert brokers[1]["listeners"] == "PLAINTEXT://:9192,SSL://:9193"
    assert [b["metadata.log.dir"] for b in brokers] == ["/meta/broker-10", "/meta/broker-11"]


def test_zookeeper_brokers_take_broker_ids() -> None:
    zk = {"broker.id": "1", "zookeeper.connect": "zk:2181", "listeners": "PLAINTEXT://0.0.0.0:9092",
          "log.dir": "/var/lib/grete"}
    brokers = lay_out(zk, 2, FACTS)
    assert [(b["broker.id"], b["listeners"], b["log.dirs"]) for b in brokers] == [
        ("1", "PLAINTEXT://0.0.0.0:9092", "/var/lib/grete/broker-1"),
        ("2", "PLAINTEXT://0.0.0.0:9093", "/var/lib/grete/broker-2")]
    assert all("log.dir" not in b and "node.id" not in b for b in brokers)


@pytest.mark.parametrize(("change", "message"), [
    ({"process.roles": "broker,controller"}, "brokers only"),
    ({"node.id": None}, "node.id"),
    ({"node.id": "ten"}, "must be a number"),
    ({"listeners": "PLAINTEXT://:0"}, "port 0"),
    ({"listeners": "PLAINTEXT:9092"}, "cannot read the listener"),
    ({"log.dirs": None}, "log.dirs"),
])
def test_refused_with_the_reason(change: dict[str, str | None], message: str) -> None:
    items = {k: v for k, v in {**KRAFT, **change}.items() if v is not None}
    with pytest.raises(HostLayoutError, match=message):
        lay_out(items, 2, FACTS)


def test_broker_count_is_one_per_core_by_default() -> None:
    assert broker_count("auto", FACTS) == 4
    assert broker_count("2", FACTS) == 2
    for bad in ("0", "many"):
        with pytest.raises(HostLayoutError):
            broker_count(bad, FACTS)
