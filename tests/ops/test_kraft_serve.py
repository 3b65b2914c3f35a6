"""A Kafka 4 operator's start: ``kafka-storage format`` (Kafka's own tool, 4.3.1) with a KRaft
``server.properties``, then ``grete serve`` on it: the formatted cluster id, the bootstrap feature
levels as the metadata log's first records, the ``--add-scram`` admin able to log in. What grete
cannot be yet (a separate KRaft broker, a combined node in a quorum of several) is refused at start, and so
is a controller whose storage was never formatted."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from grete.broker.config import ConfigError, StartupError
from grete.broker.node import Node
from grete.broker.server import embedded_config
from grete.coordinator.kraft.quorum import SingleVoterQuorum
from grete.protocol.metadata import FeatureLevelRecord, UserScramCredentialRecord
from grete.storage.meta_properties import read_meta_properties
from grete.testing import broker
from grete.testing.cluster import free_port
from tools import kafka_dist

CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


def _kraft_properties(tmp_path: Path, port: int, sasl_port: int, controller_port: int) -> dict[str, str]:
    return {
        "process.roles": "broker,controller", "node.id": "1",
        "listeners": (f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                      f"CONTROLLER://127.0.0.1:{controller_port}"),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "log.dirs": str(tmp_path / "logs"),
    }


def test_grete_serves_storage_formatted_by_kafka_storage(tmp_path: Path) -> None:
    kafka_dist.fetch("4.3.1")
    port, sasl_port, controller_port = free_port(), free_port(), free_port()
    props = _kraft_properties(tmp_path, port, sasl_port, controller_port)
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    kafka_dist.run_tool("4.3.1", "kafka-storage", "format", "-t", CLUSTER_ID, "-c", str(config), "--standalone",
                        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]", check=True)
    with broker(props, data_dir=tmp_path / "logs", subprocess=True):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        assert admin.describe_cluster().result(15).cluster_id == CLUSTER_ID
        scram = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin", "sasl.password": "admin-secret"}
        producer = Producer(scram)
        producer.produce("by-admin", b"v")
        assert producer.flush(20) == 0
    meta = read_meta_properties(tmp_path / "logs")
    assert meta is not None and meta.cluster_id == CLUSTER_ID and meta.directory_id is not None
    quorum = SingleVoterQuorum(tmp_path / "logs", 1, meta.directory_id)
    records = [record for _offset, record, _version in quorum.replay()]
    quorum.close()
    first = records[:2]
    assert isinstance(first[0], FeatureLevelRecord) and first[0].name == "metadata.version"
    assert any(isinstance(r, UserScramCredentialRecord) and r.name == "admin" for r in records)


def test_tools_reach_the_quorum_through_the_controller_listener(tmp_path: Path) -> None:
    """KIP-919's --bootstrap-controller: the listener of controller.listener.names is a controller
    endpoint; a broker listener refuses to be one (MISMATCHED_ENDPOINT_TYPE)."""
    kafka_dist.fetch("4.3.1")
    port, controller_port = free_port(), free_port()
    props = {"listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
             "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}
    with broker(props, data_dir=tmp_path, subprocess=True):
        status = kafka_dist.run_tool("4.3.1", "kafka-metadata-quorum", "--bootstrap-controller",
                                     f"127.0.0.1:{controller_port}", "describe", "--status", timeout=90)
        assert status.returncode == 0, status.stderr[-2000:]
        assert f'"endpoints": ["CONTROLLER://127.0.0.1:{controller_port}"]' in status.stdout
        features = kafka_dist.run_tool("4.3.1", "kafka-features", "--bootstrap-controller",
                                       f"127.0.0.1:{controller_port}", "describe", timeout=90)
        assert features.returncode == 0 and "Feature: group.version" in features.stdout, features.stderr[-2000:]
        wrong = kafka_dist.run_tool("4.3.1", "kafka-metadata-quorum", "--bootstrap-controller",
                                    f"127.0.0.1:{port}", "describe", "--status", timeout=90)
        assert wrong.returncode != 0 and "MismatchedEndpointTypeException" in wrong.stderr + wrong.stdout


@pytest.mark.parametrize(("overrides", "reason"), [
    # A combined node of a quorum of several needs its controller listener (Kafka's words) and one
    # for its broker.
    ({"controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094"},
     "controller.listener.names must contain at least one value appearing in the 'listeners' configuration"),
    ({"controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094", "controller.listener.names": "PLAINTEXT"},
     "listeners must include a listener that is not a controller listener"),
])
def test_what_a_combined_node_cannot_be_is_refused(tmp_path: Path, overrides: dict[str, str], reason: str) -> None:
    config = embedded_config([f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0",
                              *[f"{k}={v}" for k, v in overrides.items()]])
    with pytest.raises(ConfigError) as refused:
        Node(config)
    assert reason in str(refused.value)


def test_a_broker_of_a_kraft_cluster_needs_formatted_storage_and_an_id_of_its_own(tmp_path: Path) -> None:
    """As Kafka's: a broker (process.roles=broker) does not format itself, and its id must not be a
    voter's (Kafka's KafkaConfig refuses that in the same words)."""
    base = [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0", "process.roles=broker",
            "controller.listener.names=CONTROLLER", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]
    with pytest.raises(StartupError) as refused:
        Node(embedded_config([*base, "node.id=5", "controller.quorum.voters=1@127.0.0.1:9093"]))
    assert str(tmp_path) in str(refused.value) and "grete storage format" in str(refused.value)
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=KvFjOHmGQ7SXaNwGLU8dPQ\nnode.id=1\n"
                                              "directory.id=Zv9UPwjyTpiHb0z28NVLmA\n")
    with pytest.raises(StartupError) as refused:
        Node(embedded_config([*base, "node.id=1", "controller.quorum.voters=1@127.0.0.1:9093"]))
    assert "the node id 1 must not be included in the set of voters" in str(refused.value)


def test_a_controller_needs_formatted_storage(tmp_path: Path) -> None:
    """As Kafka's: a controller of a quorum does not format itself (every voter must share the
    cluster id the operator chose); the start names the directory and the format step."""
    config = embedded_config([f"log.dirs={tmp_path}", "listeners=CONTROLLER://127.0.0.1:0", "process.roles=controller",
                              "controller.listener.names=CONTROLLER", "controller.quorum.voters=1@127.0.0.1:9093",
                              "listener.security.protocol.map=CONTROLLER:PLAINTEXT"])
    with pytest.raises(StartupError) as refused:
        Node(config)
    assert str(tmp_path) in str(refused.value) and "grete storage format" in str(refused.value)
