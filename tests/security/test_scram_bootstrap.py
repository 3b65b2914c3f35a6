"""``grete scram add``: the first SCRAM user written before the broker starts (Kafka's
``kafka-storage format --add-scram``, and ``kafka-configs --zookeeper`` for a ZooKeeper cluster), so
a SASL node needs no PLAIN login to create it. A stock client then logs in with it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.cli import main
from grete.coordinator.zookeeper import zk_layout as zkl
from grete.testing import broker
from grete.testing.cluster import GreteCluster, ZooKeeperProcess, free_port
from tests.cluster.conftest import need_zookeeper, wait_until

SASL_ONLY = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}


def _conf(port: int, mechanism: str, user: str, password: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **extra}


def _logs_in_and_writes(conf: dict[str, object], topic: str) -> None:
    """Creates ``topic`` as this user and writes to it."""
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    producer = Producer(conf)
    producer.produce(topic, b"first", partition=0)
    assert producer.flush(15) == 0


def _refused(conf: dict[str, object]) -> None:
    errors: list[KafkaError] = []
    delivered: list[object] = []
    producer = Producer({**conf, "error_cb": errors.append})
    producer.produce("anything", b"x", partition=0, on_delivery=lambda err, _m: delivered.append(err) if err is None else None)
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)  # until the failed login is reported, not a flush timeout
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    producer.poll(0.2)
    # The record was not delivered (len(producer) also counts queued error events, so it is no measure).
    assert delivered == []


def _properties(path: Path, items: dict[str, str]) -> str:
    path.write_text("".join(f"{key}={value}\n" for key, value in items.items()))
    return str(path)


def test_first_scram_users_on_a_single_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    config = _properties(tmp_path / "server.properties", {**SASL_ONLY, "log.dirs": str(data)})
    assert main(["scram", "add", "--config", config, "--user", "admin", "--password", "admin-secret"]) == 0
    assert main(["scram", "add", "--config", config,
                 "--add-scram", 'SCRAM-SHA-512=[name=alice,password="a,b=c",iterations=8192]']) == 0
    metadata_log = (data / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    assert b"alice" in metadata_log and b"admin-secret" not in metadata_log
    with broker(SASL_ONLY, data_dir=data, subprocess=True) as node:
        _logs_in_and_writes(_conf(node.port, "SCRAM-SHA-256", "admin", "admin-secret"), "by-admin")
        _logs_in_and_writes(_conf(node.port, "SCRAM-SHA-512", "alice", "a,b=c"), "by-alice")
        _refused(_conf(node.port, "SCRAM-SHA-256", "nobody", "admin-secret"))
        _refused(_conf(node.port, "SCRAM-SHA-256", "admin", "wrong"))
        _refused(_conf(node.port, "SCRAM-SHA-256", "alice", "a,b=c"))  # her credential is SHA-512's
        # The running broker holds its log dir: the command refuses rather than write behind it.
        capsys.readouterr()
        assert main(["scram", "add", "--config", config, "--user", "late", "--password", "late-secret"]) == 1
        assert "Stop the broker first" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--user", "admin", "--password", "x", "--mechanism", "SCRAM-SHA-1"], "Unsupported SCRAM mechanism"),
    (["--user", "admin", "--password", "x", "--iterations", "100"], "iterations must be between 4096 and 16384"),
    (["--user", "admin"], "--user and --password go together"),
    (["--add-scram", "SCRAM-SHA-256=[name=admin]"], "name and password are required"),
    (["--add-scram", "SCRAM-SHA-256=[name=a,password=b,salt=c]"], "unsupported keys ['salt']"),
    ([], "nothing to add"),
])
def test_bad_credentials_are_refused_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    args: list[str], message: str) -> None:
    config = _properties(tmp_path / "server.properties", {**SASL_ONLY, "log.dirs": str(tmp_path / "data")})
    assert main(["scram", "add", "--config", config, *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    need_zookeeper()
    running = ZooKeeperProcess(tmp_path)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_first_scram_user_in_a_zookeeper_cluster(tmp_path: Path, zookeeper: ZooKeeperProcess) -> None:
    config = _properties(tmp_path / "zk.properties", {"zookeeper.connect": zookeeper.connect})
    assert main(["scram", "add", "--config", config, "--user", "admin", "--password", "admin-secret"]) == 0
    client = KazooClient(hosts=zookeeper.connect)
    client.start(10)
    try:
        stored = zkl.decode_config(client.get("/config/users/admin")[0])
        assert zkl.decode_scram(stored["SCRAM-SHA-256"])[3] == 4096 and "admin-secret" not in json.dumps(stored)
        changes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in client.get_children("/config/changes")]
        assert changes == [{"version": 2, "entity_path": "users/admin"}]
    finally:
        client.stop()
        client.close()
    sasl_port = free_port()
    running = GreteCluster(tmp_path, zookeeper, {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "offsets.topic.replication.factor": "1"})
    try:
        running.start_broker(1)
        _logs_in_and_writes(_conf(sasl_port, "SCRAM-SHA-256", "admin", "admin-secret"), "by-admin")
        _refused(_conf(sasl_port, "SCRAM-SHA-256", "nobody", "admin-secret"))
        # A user added while the broker runs reaches it through the change notification.
        assert main(["scram", "add", "--config", config, "--user", "bob", "--password", "bob-secret"]) == 0
        wait_until(lambda: _logs_in(_conf(sasl_port, "SCRAM-SHA-256", "bob", "bob-secret")), what="bob's login")
    finally:
        running.stop()


def _logs_in(conf: dict[str, object]) -> bool:
    try:
        AdminClient(conf).list_topics(timeout=5)
    except KafkaException:
        return False
    return True
