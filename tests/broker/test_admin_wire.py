"""Admin APIs on the wire: requests built with the codecs, sent to a real broker over TCP, and the
answers checked against what Kafka answers (codes, messages, versions)."""

from __future__ import annotations

import os
import socket
import struct
import uuid
from typing import Any

import pytest

from grete.broker.config import ConfigSource
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, decode_response_header, encode_request_header
from grete.protocol.messages import (
    APIS,
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
    response_header_version,
)

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
ZERO = uuid.UUID(int=0)


def call(b: Any, request: Any, version: int) -> Any:
    """One request on a fresh connection; returns the decoded response."""
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=request.API_KEY, api_version=version, correlation_id=11,
                                          client_id="admin-test"))
    request.encode(w, version)
    payload = w.getvalue()
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = _recv(s, struct.unpack(">i", _recv(s, 4))[0])
    correlation, pos = decode_response_header(frame, response_header_version(request.API_KEY, version))
    assert correlation == 11
    return APIS[request.API_KEY].response.decode(Reader(frame, pos), version)


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def create(b: Any, version: int = 7, validate_only: bool = False, **topic: Any) -> Any:
    t = CreateTopicsRequest.CreatableTopic(
        name=topic["name"], num_partitions=topic.get("partitions", -1),
        replication_factor=topic.get("rf", -1),
        assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=ids)
                     for i, ids in topic.get("assignments", [])],
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                 for k, v in topic.get("configs", {}).items()])
    return call(b, CreateTopicsRequest(topics=[t], timeout_ms=5000, validate_only=validate_only), version)


def topic_configs(b: Any, name: str, synonyms: bool = True, version: int = 4) -> dict[str, Any]:
    resp = call(b, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=name, configuration_keys=None)], include_synonyms=synonyms,
        include_documentation=version >= 3), version)
    (result,) = resp.results
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


# --- CreateTopics ---------------------------------------------------------------------------
@pytest.mark.grete_overrides(**{"num.partitions": "3"})
def test_create_defaults_and_v7_answer(grete_broker: Any, topic_name: str) -> None:
    (r,) = create(grete_broker, name=topic_name, configs={"retention.ms": "60000"}).topics
    assert r.error_code == 0 and r.error_message is None
    assert r.num_partitions == 3 and r.replication_factor == 1  # -1 took num.partitions=3
    meta = grete_broker.broker.metadata.topic(topic_name)
    assert r.topic_id == meta.topic_id != ZERO
    configs = {c.name: c for c in r.configs}
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    assert configs["cleanup.policy"].value == "delete"
    # The override is live on the partitions' logs.
    assert grete_broker.broker.partitions[(topic_name, 0)].config.retention_ms == 60000


def test_create_v4_has_no_configs_and_validate_only_creates_nothing(grete_broker: Any, topic_name: str) -> None:
    (r,) = create(grete_broker, version=4, name=topic_name, partitions=2).topics
    assert r.error_code == 0
    assert r.configs in (None, [])  # field does not exist before v5
    other = topic_name + "-dry"
    (r,) = create(grete_broker, name=other, partitions=5, validate_only=True).topics
    assert r.error_code == 0 and r.num_partitions == 5
    assert r.replication_factor == 1  # -1 resolved to default.replication.factor, as Kafka answers it
    assert grete_broker.broker.metadata.topic(other) is None


@pytest.mark.parametrize(("topic", "code", "message"), [
    ({"partitions": 0}, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
    ({"partitions": -5}, ErrorCode.INVALID_PARTITIONS, None),
    ({"rf": 0}, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0"),
    ({"rf": 3}, ErrorCode.INVALID_REPLICATION_FACTOR, None),
    ({"configs": {"retention.ms": "soon"}}, ErrorCode.INVALID_CONFIG, "retention.ms"),
    ({"configs": {"no.such.config": "1"}}, ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
    ({"configs": {"retention.ms": None}}, ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs"),
    ({"assignments": [(0, [1])], "partitions": 1}, ErrorCode.INVALID_REQUEST, "numPartitions was not set to -1"),
    ({"assignments": [(0, [2])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "includes broker 2, but no such broker"),
    ({"assignments": [(0, [1, 1])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "more than once"),
    ({"assignments": [(0, [])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
    ({"assignments": [(1, [1])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based"),
    ({"assignments": [(0, [1]), (0, [1])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "multiple manual partition"),
])
def test_create_errors(grete_broker: Any, topic_name: str, topic: dict[str, Any], code: ErrorCode,
                       message: str | None) -> None:
    (r,) = create(grete_broker, name=topic_name, **topic).topics
    assert (r.error_code, r.num_partitions, r.topic_id) == (code, -1, ZERO)
    if message:
        assert message in r.error_message
    assert grete_broker.broker.metadata.topic(topic_name) is None


def test_create_manual_assignment_on_this_node(grete_broker: Any, topic_name: str) -> None:
    (r,) = create(grete_broker, name=topic_name, assignments=[(0, [1]), (1, [1])]).topics
    assert (r.error_code, r.num_partitions, r.replication_factor) == (0, 2, 1)


def test_create_exists_invalid_name_collision_and_duplicates(grete_broker: Any, topic_name: str) -> None:
    assert create(grete_broker, name="a.b").topics[0].error_code == 0
    (r,) = create(grete_broker, name="a.b").topics
    assert (r.error_code, r.error_message) == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'a.b' already exists.")
    (r,) = create(grete_broker, name="a_b").topics
    assert r.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and "collides with existing topic: a.b" in r.error_message
    assert create(grete_broker, name="bad/name").topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    dup = CreateTopicsRequest.CreatableTopic(name=topic_name, num_partitions=1, replication_factor=1)
    ok = CreateTopicsRequest.CreatableTopic(name=topic_name + "-ok", num_partitions=1, replication_factor=1)
    resp = call(grete_broker, CreateTopicsRequest(topics=[dup, ok, dup], timeout_ms=1000), 7)
    assert [(t.name, t.error_code) for t in resp.topics] == [
        (topic_name + "-ok", 0), (topic_name, ErrorCode.INVALID_REQUEST)]
    assert grete_broker.broker.metadata.topic(topic_name) is None


# --- DeleteTopics ---------------------------------------------------------------------------
def test_delete_by_name_and_by_id(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 2)
    second = topic_name + "-2"
    grete_broker.create_topic(second, 1)
    second_id = grete_broker.broker.metadata.topic(second).topic_id
    resp = call(grete_broker, DeleteTopicsRequest(topic_names=[topic_name, "missing"], timeout_ms=1000), 5)
    got = {r.name: (r.error_code, r.error_message) for r in resp.responses}
    assert got == {topic_name: (0, None), "missing": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                       "This server does not host this topic-partition.")}
    assert grete_broker.broker.metadata.topic(topic_name) is None
    assert (topic_name, 0) not in grete_broker.broker.partitions
    unknown = uuid.uuid4()
    resp = call(grete_broker, DeleteTopicsRequest(topics=[
        DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=second_id),
        DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=unknown),
        DeleteTopicsRequest.DeleteTopicState(name="x", topic_id=unknown)], timeout_ms=1000), 6)
    got = {(r.name, r.topic_id): r.error_code for r in resp.responses}
    assert got == {(second, second_id): 0, (None, unknown): ErrorCode.UNKNOWN_TOPIC_ID,
                   ("x", unknown): ErrorCode.INVALID_REQUEST}
    assert grete_broker.broker.metadata.topic(second) is None


@pytest.mark.grete_overrides(**{"delete.topic.enable": "false"})
def test_delete_disabled(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name)
    for version, code in ((2, ErrorCode.INVALID_REQUEST), (3, ErrorCode.TOPIC_DELETION_DISABLED)):
        resp = call(grete_broker, DeleteTopicsRequest(topic_names=[topic_name], timeout_ms=1000), version)
        assert [r.error_code for r in resp.responses] == [code]
    assert grete_broker.broker.metadata.topic(topic_name) is not None


# --- CreatePartitions -----------------------------------------------------------------------
def test_create_partitions(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 2)

    def grow(count: int, assignments: list[list[int]] | None = None, validate_only: bool = False) -> Any:
        t = CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic_name, count=count, assignments=None if assignments is None else [
                CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=ids) for ids in assignments])
        (r,) = call(grete_broker, CreatePartitionsRequest(topics=[t], timeout_ms=1000,
                                                          validate_only=validate_only), 3).results
        return r.error_code, r.error_message

    assert grow(2) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partition(s).")
    assert grow(1)[0] == ErrorCode.INVALID_PARTITIONS
    assert grow(4, [[1]])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(3, [[7]])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(5, validate_only=True) == (0, None)
    assert len(grete_broker.broker.metadata.topic(topic_name).partitions) == 2
    assert grow(4, [[1], [1]]) == (0, None)
    assert len(grete_broker.broker.metadata.topic(topic_name).partitions) == 4
    assert (topic_name, 3) in grete_broker.broker.partitions


# --- DescribeConfigs ------------------------------------------------------------------------
@pytest.mark.grete_overrides(**{"log.retention.hours": "2", "log.segment.bytes": "5000000"})
def test_describe_topic_sources_and_synonyms(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 1, {"segment.bytes": "2000000"})
    configs = topic_configs(grete_broker, topic_name)
    seg = configs["segment.bytes"]
    assert (seg.value, seg.config_source) == ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
        ("segment.bytes", "2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", "5000000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG)]
    # log.retention.hours=2 in server.properties: the value follows it, but as Kafka's ConfigHelper
    # does, the broker synonyms ahead of log.retention.ms (unset) are dropped: DEFAULT_CONFIG, none.
    ret = configs["retention.ms"]
    assert (ret.value, ret.config_source, ret.synonyms) == (str(2 * 3600 * 1000), ConfigSource.DEFAULT_CONFIG, [])
    assert configs["cleanup.policy"].config_type == 7  # LIST
    assert configs["preallocate"].config_type == 1  # BOOLEAN
    assert not any(c.read_only or c.is_sensitive for c in configs.values())
    # Without include_synonyms: no synonyms, same sources; v1 has no config_type.
    plain = topic_configs(grete_broker, topic_name, synonyms=False, version=1)
    assert plain["segment.bytes"].synonyms == [] and plain["segment.bytes"].config_source == 1
    assert plain.keys() == configs.keys()


def test_describe_errors_and_key_filter(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name)
    R = DescribeConfigsRequest.DescribeConfigsResource
    resp = call(grete_broker, DescribeConfigsRequest(resources=[
        R(resource_type=TOPIC, resource_name=topic_name, configuration_keys=["retention.ms", "nope"]),
        R(resource_type=TOPIC, resource_name="missing", configuration_keys=None),
        R(resource_type=BROKER, resource_name="7", configuration_keys=None),
        R(resource_type=BROKER, resource_name="x", configuration_keys=None),
        R(resource_type=BROKER, resource_name="", configuration_keys=None),
        R(resource_type=BROKER_LOGGER, resource_name="1", configuration_keys=None),
        R(resource_type=99, resource_name="1", configuration_keys=None),
    ]), 4)
    got = [(r.error_code, [c.name for c in r.configs]) for r in resp.results]
    assert got[0] == (0, ["retention.ms"])
    assert got[1] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert got[2][0] == got[3][0] == ErrorCode.INVALID_REQUEST
    assert "Unexpected broker id, expected 1" in resp.results[2].error_message
    # The one cluster default Kafka 4.3's controller writes itself (ELR): min.insync.replicas.
    assert got[4] == (0, ["min.insync.replicas"])
    assert got[5][0] == 0 and "root" in got[5][1]
    assert got[6][0] == ErrorCode.INVALID_REQUEST


def test_describe_broker(grete_broker: Any) -> None:
    resp = call(grete_broker, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name="1", configuration_keys=None)], include_synonyms=True), 4)
    configs = {c.name: c for c in resp.results[0].configs}
    listeners = configs["listeners"]
    assert listeners.config_source == ConfigSource.STATIC_BROKER_CONFIG and listeners.read_only
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("168", ConfigSource.DEFAULT_CONFIG)
    assert [s.name for s in hours.synonyms] == ["log.retention.hours"]  # ms/minutes siblings dropped


# --- AlterConfigs / IncrementalAlterConfigs --------------------------------------------------
def _alter(b: Any, name: str, configs: dict[str, str | None], rtype: int = TOPIC, validate_only: bool = False) -> Any:
    res = AlterConfigsRequest.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()])
    (r,) = call(b, AlterConfigsRequest(resources=[res], validate_only=validate_only), 2).responses
    return r.error_code, r.error_message


def _incremental(b: Any, name: str, ops: list[tuple[str, int, str | None]], rtype: int = TOPIC) -> Any:
    res = IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
    (r,) = call(b, IncrementalAlterConfigsRequest(resources=[res], validate_only=False), 1).responses
    return r.error_code, r.error_message


def test_alter_configs_replaces_whole_set(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 1, {"retention.ms": "1000", "segment.bytes": "2000000"})
    assert _alter(grete_broker, topic_name, {"retention.ms": "5000"}, validate_only=True) == (0, None)
    assert grete_broker.broker.metadata.topic(topic_name).configs["retention.ms"] == "1000"
    assert _alter(grete_broker, topic_name, {"retention.ms": "5000"}) == (0, None)
    assert grete_broker.broker.metadata.topic(topic_name).configs == {"retention.ms": "5000"}
    assert grete_broker.broker.partitions[(topic_name, 0)].config.retention_ms == 5000
    assert _alter(grete_broker, topic_name, {"retention.ms": "x"})[0] == ErrorCode.INVALID_CONFIG
    assert _alter(grete_broker, topic_name, {"retention.ms": None})[0] == ErrorCode.INVALID_REQUEST
    assert _alter(grete_broker, "missing", {}) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                   "The topic 'missing' does not exist.")
    code, message = _alter(grete_broker, "1", {"log.dirs": "/elsewhere"}, rtype=BROKER)
    assert code == ErrorCode.INVALID_REQUEST and "Cannot update these configs dynamically" in message
    assert _alter(grete_broker, "", {"min.insync.replicas": "1"}, rtype=BROKER) == (0, None)
    assert _alter(grete_broker, "1", {}, rtype=BROKER) == (0, None)
    assert _alter(grete_broker, "2", {}, rtype=BROKER)[0] == ErrorCode.INVALID_REQUEST


def test_dynamic_broker_configs(grete_broker: Any, topic_name: str) -> None:
    """Kafka's dynamic broker configs: a cluster default and a per-broker value win over
    server.properties in that order, reach topics without an override at once, and persist."""
    grete_broker.create_topic(topic_name, 1)
    other = topic_name + "-kept"
    grete_broker.create_topic(other, 1, {"retention.ms": "1000"})
    cluster_min_isr = {"min.insync.replicas": "1"}  # AlterConfigs must keep it (ELR)
    assert _alter(grete_broker, "", {"log.retention.ms": "7200000", **cluster_min_isr}, rtype=BROKER) == (0, None)
    assert grete_broker.broker.partitions[(topic_name, 0)].config.retention_ms == 7_200_000
    assert grete_broker.broker.partitions[(other, 0)].config.retention_ms == 1000  # its override wins
    assert _alter(grete_broker, "1", {"log.retention.ms": "3600000"}, rtype=BROKER) == (0, None)
    assert grete_broker.broker.partitions[(topic_name, 0)].config.retention_ms == 3_600_000
    described = call(grete_broker, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name="1", configuration_keys=["log.retention.ms"])],
        include_synonyms=True), 4).results[0].configs[0]
    assert (described.value, described.config_source, described.read_only) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [s.source for s in described.synonyms][:2] == [ConfigSource.DYNAMIC_BROKER_CONFIG,
                                                          ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
    default = call(grete_broker, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name="")]), 4).results[0].configs
    assert sorted((c.name, c.value, c.config_source) for c in default) == [
        ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("min.insync.replicas", "1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    code, message = _alter(grete_broker, "1", {"log.retention.ms": "soon"}, rtype=BROKER)
    assert code == ErrorCode.INVALID_REQUEST  # Kafka 4.3's code for a bad broker value
    assert grete_broker.broker.metadata.broker_configs("1") == {"log.retention.ms": "3600000"}
    assert _alter(grete_broker, "1", {}, rtype=BROKER) == (0, None)  # AlterConfigs replaces the whole set
    assert grete_broker.broker.partitions[(topic_name, 0)].config.retention_ms == 7_200_000
    assert _alter(grete_broker, "", cluster_min_isr, rtype=BROKER) == (0, None)


def test_dynamic_broker_config_rules(grete_broker: Any) -> None:
    """Kafka 4.3.1's answers, measured on it (compat-tests/wire/test_wire_admin_configs.py runs the
    same requests against both): which keys, at which level, by how much, with its messages."""
    SET, DELETE = 0, 1
    assert _incremental(grete_broker, "1", [("log.retention.hours", SET, "5")], BROKER) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: [log.retention.hours]")
    assert _incremental(grete_broker, "", [("sasl.kerberos.min.time.before.relogin", SET, "70000")], BROKER) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id must be "
                                   "specified: [sasl.kerberos.min.time.before.relogin]")
    io = grete_broker.broker.config.get_int("num.io.threads")
    code, message = _incremental(grete_broker, "1", [("num.io.threads", SET, str(io * 2 + 1))], BROKER)
    assert code == ErrorCode.INVALID_REQUEST and f"not be greater than double the current value {io}" in message
    code, message = _incremental(grete_broker, "1", [("num.io.threads", SET, "0")], BROKER)
    assert code == ErrorCode.INVALID_REQUEST and "Value must be at least 1" in message
    assert _incremental(grete_broker, "1", [("grete.custom.key", SET, "x")], BROKER) == (0, None)  # kept, as Kafka
    assert _incremental(grete_broker, "1", [("grete.custom.key", DELETE, None)], BROKER) == (0, None)
    assert _incremental(grete_broker, "1", [("min.insync.replicas", SET, "1")], BROKER) == (
        ErrorCode.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    assert _incremental(grete_broker, "", [("min.insync.replicas", DELETE, None)], BROKER) == (
        ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
    assert grete_broker.broker.metadata.broker_configs("1") == {}


def test_topics_show_cluster_min_isr(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name)
    entry = topic_configs(grete_broker, topic_name)["min.insync.replicas"]
    assert (entry.value, entry.config_source) == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [s.source for s in entry.synonyms] == [ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                                  ConfigSource.DEFAULT_CONFIG]


def test_incremental_alter_configs(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 1, {"retention.ms": "1000"})
    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
    assert _incremental(grete_broker, topic_name, [("segment.bytes", SET, "3000000"),
                                                   ("cleanup.policy", APPEND, "compact")]) == (0, None)
    meta = grete_broker.broker.metadata.topic(topic_name)
    assert meta.configs == {"retention.ms": "1000", "segment.bytes": "3000000", "cleanup.policy": "delete,compact"}
    assert grete_broker.broker.partitions[(topic_name, 0)].config.compact
    assert _incremental(grete_broker, topic_name, [("cleanup.policy", SUBTRACT, "delete"),
                                                   ("retention.ms", DELETE, None)]) == (0, None)
    assert meta.configs == {"segment.bytes": "3000000", "cleanup.policy": "compact"}
    code, message = _incremental(grete_broker, topic_name, [("retention.ms", APPEND, "1")])
    assert code == ErrorCode.INVALID_CONFIG and "because its type is not LIST" in message
    assert _incremental(grete_broker, topic_name, [("a", SET, "1"), ("a", SET, "2")])[0] == ErrorCode.INVALID_REQUEST
    assert _incremental(grete_broker, topic_name, [("retention.ms", 9, "1")])[0] == ErrorCode.INVALID_REQUEST
    assert meta.configs == {"segment.bytes": "3000000", "cleanup.policy": "compact"}
    # Subtracting the last policy leaves an empty one, which Kafka 3.9 and 4.3 accept (checked against both).
    assert _incremental(grete_broker, topic_name, [("cleanup.policy", SUBTRACT, "compact")])[0] == ErrorCode.NONE
    assert meta.configs == {"segment.bytes": "3000000", "cleanup.policy": ""}


def test_broker_logger_levels(grete_broker: Any) -> None:
    import logging
    logger = logging.getLogger("grete.broker.handlers")
    before = logger.level
    try:
        assert _incremental(grete_broker, "1", [("grete.broker.handlers", 0, "DEBUG")], BROKER_LOGGER) == (0, None)
        assert logger.level == logging.DEBUG
        assert _incremental(grete_broker, "1", [("grete.broker.handlers", 0, "LOUD")], BROKER_LOGGER)[0] == \
            ErrorCode.INVALID_CONFIG
        assert _incremental(grete_broker, "1", [("grete.broker.handlers", 1, None)], BROKER_LOGGER) == (0, None)
        assert logger.level == logging.NOTSET
    finally:
        logger.setLevel(before)


# --- DeleteRecords, DescribeLogDirs, DescribeCluster ------------------------------------------
def _produce(b: Any, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(n):
        p.produce(topic, key=b"k", value=b"%d" % i, partition=0)
    assert p.flush(10) == 0


def _delete_records(b: Any, topic: str, offset: int, partition: int = 0) -> tuple[int, int]:
    req = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsRequest.DeleteRecordsPartition(partition_index=partition, offset=offset)])], timeout_ms=1000)
    (r,) = call(b, req, 2).topics[0].partitions
    return r.error_code, r.low_watermark


def test_delete_records(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 1)
    _produce(grete_broker, topic_name, 10)
    assert _delete_records(grete_broker, topic_name, 4) == (0, 4)
    assert _delete_records(grete_broker, topic_name, 2) == (0, 4)  # never goes back
    assert _delete_records(grete_broker, topic_name, 11) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert _delete_records(grete_broker, topic_name, -7) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert _delete_records(grete_broker, topic_name, -1) == (0, 10)  # -1: the high watermark
    assert grete_broker.broker.partitions[(topic_name, 0)].log_start_offset == 10
    assert _delete_records(grete_broker, topic_name, 0, partition=5)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    compacted = topic_name + "-c"
    grete_broker.create_topic(compacted, 1, {"cleanup.policy": "compact"})
    assert _delete_records(grete_broker, compacted, 0) == (ErrorCode.POLICY_VIOLATION, -1)


def test_describe_log_dirs(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 2)
    _produce(grete_broker, topic_name, 5)
    (d,) = call(grete_broker, DescribeLogDirsRequest(topics=None), 4).results
    assert d.error_code == 0 and d.log_dir == os.path.abspath(grete_broker.data_dir)
    assert 0 < d.usable_bytes <= d.total_bytes
    sizes = {(t.name, p.partition_index): p.partition_size for t in d.topics for p in t.partitions}
    partition = grete_broker.broker.partitions[(topic_name, 0)]
    assert sizes[(topic_name, 0)] == partition.size_bytes > 0 and sizes[(topic_name, 1)] == 0
    wanted = [DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic_name, partitions=[1])]
    (d,) = call(grete_broker, DescribeLogDirsRequest(topics=wanted), 1).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in d.topics] == [(topic_name, [1])]


def test_describe_cluster(grete_broker: Any) -> None:
    resp = call(grete_broker, DescribeClusterRequest(include_cluster_authorized_operations=True), 1)
    meta = call(grete_broker, MetadataRequest(topics=[]), 12)
    assert resp.error_code == 0 and resp.cluster_id == meta.cluster_id
    assert resp.controller_id == 1 and resp.cluster_authorized_operations > 0
    assert [(x.broker_id, x.host, x.port) for x in resp.brokers] == [
        (x.node_id, x.host, x.port) for x in meta.brokers]
    resp = call(grete_broker, DescribeClusterRequest(endpoint_type=2), 1)
    assert resp.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_offset_commit_for_an_unknown_topic_or_partition(grete_broker: Any, topic_name: str) -> None:
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for partitions its metadata lacks, and commits the rest."""
    from grete.protocol.messages import FindCoordinatorRequest, OffsetCommitRequest

    grete_broker.create_topic(topic_name, 1)
    call(grete_broker, FindCoordinatorRequest(key="g-unknown", key_type=0), 3)  # creates __consumer_offsets
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = OffsetCommitRequest.OffsetCommitRequestPartition
    request = OffsetCommitRequest(group_id="g-unknown", generation_id_or_member_epoch=-1, member_id="",
                                  topics=[topic(name=topic_name, partitions=[part(partition_index=0, committed_offset=1),
                                                                             part(partition_index=5, committed_offset=1)]),
                                          topic(name="no-such-topic", partitions=[part(partition_index=0,
                                                                                       committed_offset=1)])])
    answer = call(grete_broker, request, 8)
    codes = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    assert codes == {(topic_name, 0): 0, (topic_name, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
