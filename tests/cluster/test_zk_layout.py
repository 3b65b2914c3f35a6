"""The znodes' JSON, as Kafka 3.9's ZkData writes and reads it (pure: no ZooKeeper needed)."""

from __future__ import annotations

import json
import uuid

from grete.coordinator.zookeeper import zk_layout as zk


def test_broker_registration_has_kafkas_v5_fields() -> None:
    info = zk.BrokerInfo(2, (zk.EndPoint("PLAINTEXT", "10.0.0.2", 9092, "PLAINTEXT"),
                             zk.EndPoint("SSL", "10.0.0.2", 9093, "SSL")), rack="r1")
    raw = json.loads(zk.encode_broker(info, 1700000000000))
    assert raw["version"] == 5
    assert raw["jmx_port"] == -1  # mandatory for Kafka's decoder
    assert raw["timestamp"] == "1700000000000"  # a string, as Kafka writes it
    assert (raw["host"], raw["port"]) == ("10.0.0.2", 9092)  # the first PLAINTEXT endpoint
    assert raw["endpoints"] == ["PLAINTEXT://10.0.0.2:9092", "SSL://10.0.0.2:9093"]
    assert raw["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert raw["rack"] == "r1"
    # A 3.9.2 broker in ZooKeeper mode supports no features, and says so.
    assert raw["features"] == {}
    assert list(raw)[:2] == ["features", "listener_security_protocol_map"]  # Kafka's key order


def test_broker_registration_without_plaintext_has_null_host() -> None:
    info = zk.BrokerInfo(1, (zk.EndPoint("INTERNAL", "h", 1, "SSL"),))
    raw = json.loads(zk.encode_broker(info, 1))
    assert raw["host"] is None and raw["port"] == -1
    assert "rack" not in raw


def test_decode_broker_written_by_kafka() -> None:
    # The exact bytes a Kafka 3.9.2 broker registered as /brokers/ids/1 (captured from one started
    # on Debian's ZooKeeper, compat-tests/cluster/FINDINGS.md).
    data = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
            b'"endpoints":["PLAINTEXT://127.0.0.1:46975"],"jmx_port":-1,"port":46975,"host":"127.0.0.1",'
            b'"version":5,"timestamp":"1795655383040"}')
    info = zk.decode_broker(1, data, epoch=25)
    assert info.id == 1 and info.epoch == 25 and info.rack is None and info.features == {}
    assert info.endpoints == (zk.EndPoint("PLAINTEXT", "127.0.0.1", 46975, "PLAINTEXT"),)
    # grete writes the same bytes for the same broker (timestamp and port aside).
    assert zk.encode_broker(info, 1795655383040) == data


def test_topic_znode_round_trip_and_format() -> None:
    topic_id = uuid.UUID("5f3b9a2e-1c4d-4e8f-9a0b-1c2d3e4f5a6b")
    data = zk.encode_topic(zk.TopicAssignment({1: [2, 3], 0: [1, 2]}, topic_id))
    raw = json.loads(data)
    assert list(raw) == ["partitions", "topic_id", "adding_replicas", "removing_replicas", "version"]
    assert raw["version"] == 3
    assert raw["partitions"] == {"0": [1, 2], "1": [2, 3]}  # partition keys are strings
    assert raw["adding_replicas"] == {} and raw["removing_replicas"] == {}
    assert zk.decode_topic(data).topic_id == topic_id
    assert zk.decode_topic(data).partitions == {0: [1, 2], 1: [2, 3]}


def test_topic_znode_from_an_old_tool_has_no_id() -> None:
    assert zk.decode_topic(b'{"version":1,"partitions":{"0":[1]}}').topic_id is None


def test_partition_state() -> None:
    state = zk.PartitionState(leader=2, leader_epoch=5, isr=[2, 3], controller_epoch=4)
    raw = json.loads(zk.encode_partition_state(state))
    assert raw == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 5, "isr": [2, 3]}
    state.recovering = True
    assert json.loads(zk.encode_partition_state(state))["leader_recovery_state"] == 1
    back = zk.decode_partition_state(zk.encode_partition_state(state), zk_version=9)
    assert back.recovering and back.zk_version == 9 and back.isr == [2, 3]


def test_small_znodes() -> None:
    assert json.loads(zk.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}  # a string version
    assert zk.encode_controller_epoch(12) == b"12"  # a bare number, not JSON
    controller = json.loads(zk.encode_controller(3, 99))
    assert controller == {"version": 2, "brokerid": 3, "timestamp": "99", "kraftControllerEpoch": -1}
    assert json.loads(zk.encode_config_change("topics", "t")) == {"version": 2, "entity_path": "topics/t"}
    assert zk.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}') == ("topics", "t")
    assert json.loads(zk.encode_producer_id_block(1, 1000, 1999)) == {
        "version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
    assert zk.decode_producer_id_block(b"") == (-1, -1)
    # What a 3.9.2 controller writes (Kafka's decoder cannot even read a level-0 feature).
    assert zk.encode_feature(zk.FINALIZED_FEATURES) == b'{"features":{},"version":2,"status":1}'
    assert zk.decode_feature(b'{"version":2,"status":0,"features":{}}') == {}


def test_log_dir_event_as_kafka_writes_it() -> None:
    # Kafka's LogDirEventNotificationSequenceZNode.encode: version, broker, event (1: a dir failed).
    assert zk.encode_log_dir_event(4) == b'{"version":1,"broker":4,"event":1}'
    assert zk.decode_log_dir_event(b'{"version":1,"broker":4,"event":1}') == 4
    assert zk.decode_log_dir_event(b"not json") is None
    assert zk.decode_log_dir_event(b'{"version":1}') is None
