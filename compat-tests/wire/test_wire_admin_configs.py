"""Dynamic broker configs, the cluster-level min.insync.replicas and DescribeCluster's operations:
the same raw requests against Kafka 4.3.1 and grete, Kafka's answers required of grete.

Values that depend on a broker's current settings (thread counts) are only checked for the
wording; the reference runs with its own server.properties."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from grete.testing._wire import Wire  # noqa: E402

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
IAC = IncrementalAlterConfigsRequest

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4.3's KRaft rules (ELR, list-style messages)")


def node_id(wire: Wire) -> str:
    return str(wire.call(DescribeClusterRequest(), DescribeClusterResponse, 0).brokers[0].broker_id)


def alter(wire: Wire, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = True
          ) -> tuple[int, str | None]:
    resource = IAC.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
    (r,) = wire.call(IAC(resources=[resource], validate_only=validate_only), IncrementalAlterConfigsResponse, 1).responses
    return r.error_code, r.error_message


def describe(wire: Wire, rtype: int, name: str, keys: list[str]) -> dict[str, DescribeConfigsResponse.DescribeConfigsResourceResult]:
    R = DescribeConfigsRequest.DescribeConfigsResource
    (result,) = wire.call(DescribeConfigsRequest(resources=[R(resource_type=rtype, resource_name=name,
                                                              configuration_keys=keys)],
                                                 include_synonyms=True), DescribeConfigsResponse, 4).results
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


def test_cluster_authorized_operations(wire):
    response = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=True),
                         DescribeClusterResponse, 1)
    # ALTER, ALTER_CONFIGS, CLUSTER_ACTION, CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE
    assert [b for b in range(32) if response.cluster_authorized_operations >> b & 1] == [5, 7, 8, 9, 10, 11, 12]


def test_min_insync_replicas_is_a_cluster_default(wire, make_topic):
    topic = make_topic()
    entry = describe(wire, TOPIC, topic, ["min.insync.replicas"])["min.insync.replicas"]
    assert entry.config_source == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entry.synonyms[0].source == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert "min.insync.replicas" in describe(wire, BROKER, "", ["min.insync.replicas"])
    assert alter(wire, node_id(wire), [("min.insync.replicas", SET, "1")]) == (
        ErrorCode.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    assert alter(wire, "", [("min.insync.replicas", DELETE, None)]) == (
        ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")


@pytest.mark.parametrize(("scope", "ops", "expected"), [
    ("id", [("broker.id", SET, "9"), ("log.dirs", SET, "/x")],
     "Cannot update these configs dynamically: [broker.id, log.dirs]"),
    ("id", [("log.retention.hours", SET, "5")], "Cannot update these configs dynamically: [log.retention.hours]"),
    ("", [("sasl.kerberos.min.time.before.relogin", SET, "70000")],
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "[sasl.kerberos.min.time.before.relogin]"),
    ("", [("listeners", SET, "PLAINTEXT://127.0.0.1:9")],
     "Cannot update these configs at default cluster level, broker id must be specified: [listeners]"),
    ("", [("cordoned.log.dirs", SET, "")],
     "Cannot update these configs at default cluster level, broker id must be specified: [cordoned.log.dirs]"),
    ("id", [("num.io.threads", SET, "0")], "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
    ("id", [("num.io.threads", SET, "1000")], "value should not be greater than double the current value"),
    ("id", [("log.cleaner.threads", SET, "5")],  # within the dedupe buffer
     "Log cleaner threads cannot be increased to more than double the current value"),
])
def test_refused(wire, scope, ops, expected):
    code, message = alter(wire, node_id(wire) if scope == "id" else scope, ops)
    assert code == ErrorCode.INVALID_REQUEST
    assert expected in (message or "")


@pytest.mark.parametrize(("scope", "key", "value"), [
    ("id", "sasl.kerberos.min.time.before.relogin", "70000"),
    ("", "log.cleaner.threads", "2"),
    ("", "message.max.bytes", "2000000"),
    ("", "log.retention.ms", "86400000"),
    ("id", "remote.log.reader.threads", "11"),
    ("", "group.consumer.assignment.interval.ms", "2000"),
    ("", "compression.zstd.level", "5"),
    ("id", "cordoned.log.dirs", ""),
    ("id", "grete.custom.key", "kept"),  # unknown keys are kept as custom configs
])
def test_accepted_and_shown(wire, scope, key, value):
    name = node_id(wire) if scope == "id" else scope
    assert alter(wire, name, [(key, SET, value)], validate_only=False) == (0, None)
    try:
        if key != "grete.custom.key":  # described with no value: the test below
            # Kafka's brokers see the change once the controller's record reaches them.
            deadline = time.monotonic() + 30  # generous: the reference shares two cores with the suite
            source = 2 if scope else DYNAMIC_DEFAULT_BROKER_CONFIG  # (an empty value equals the default's)
            while ((entry := describe(wire, BROKER, name, [key]).get(key)) is None or entry.value != value
                   or entry.config_source != source):
                assert time.monotonic() < deadline, entry
                time.sleep(0.1)
            assert not entry.read_only
    finally:
        assert alter(wire, name, [(key, DELETE, None)], validate_only=False) == (0, None)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "-1", None),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.zstd.level", "-131073", "Value must be at least -131072"),
    ("compression.zstd.level", "-131072", None),
    ("compression.gzip.level", "x", "Not a number of type INT"),
    ("remote.log.copy.disable", "maybe", "Expected value to be either true or false"),
    ("remote.log.delete.on.disable", "true", None),
])
def test_topic_config_values(wire, fresh_topic, key, value, message):
    resource = IAC.AlterConfigsResource(resource_type=TOPIC, resource_name=fresh_topic, configs=[
        IAC.AlterableConfig(name=key, config_operation=SET, value=value)])
    (r,) = wire.call(IAC(resources=[resource], validate_only=True), IncrementalAlterConfigsResponse, 1).responses
    if message is None:
        assert (r.error_code, r.error_message) == (0, None)
    else:
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: {message}")


def test_topic_config_keys(wire, fresh_topic):
    """Kafka 4.3.1's 33 topic configs, the compression levels and tiered-storage switches included."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    deadline = time.monotonic() + 15
    while (result := wire.call(DescribeConfigsRequest(resources=[R(resource_type=TOPIC, resource_name=fresh_topic)]),
                               DescribeConfigsResponse, 4).results[0]).error_code:
        assert time.monotonic() < deadline, result.error_message
        time.sleep(0.1)
    names = {c.name for c in result.configs}
    assert len(names) == 33
    assert {"compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "remote.log.copy.disable",
            "remote.log.delete.on.disable", "min.insync.replicas", "cleanup.policy"} <= names


def test_a_custom_broker_key_is_described_as_sensitive(wire):
    """A key Kafka has no definition for is kept, and described with no value, as sensitive (its
    type unknown: KafkaConfig.maybeSensitive), by name or with every key."""
    name = node_id(wire)
    assert alter(wire, name, [("custom.broker.key", SET, "kept")], validate_only=False) == (0, None)
    try:
        deadline = time.monotonic() + 30
        while (entry := describe(wire, BROKER, name, []).get("custom.broker.key")) is None:
            assert time.monotonic() < deadline, "never described"
            time.sleep(0.1)
        assert (entry.value, entry.is_sensitive, entry.config_source, entry.read_only, entry.config_type) == (
            None, True, 2, True, 0)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [("custom.broker.key", None, 2)]
        assert describe(wire, BROKER, name, ["custom.broker.key"])["custom.broker.key"].value is None
    finally:
        assert alter(wire, name, [("custom.broker.key", DELETE, None)], validate_only=False) == (0, None)


def test_a_replication_throttle_is_listed_only_when_set(wire):
    """Kafka's dynamic-only broker configs (the replication throttles) are not among a broker's
    configs until set, and then carry only the value set, no default among their synonyms."""
    name, key = node_id(wire), "leader.replication.throttled.rate"
    assert key not in describe(wire, BROKER, name, [])
    assert alter(wire, name, [(key, SET, "10000000")], validate_only=False) == (0, None)
    try:
        deadline = time.monotonic() + 30
        while (entry := describe(wire, BROKER, name, []).get(key)) is None:
            assert time.monotonic() < deadline, "never described"
            time.sleep(0.1)
        assert (entry.value, entry.is_sensitive, entry.config_source, entry.read_only) == ("10000000", False, 2, False)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [(key, "10000000", 2)]
    finally:
        assert alter(wire, name, [(key, DELETE, None)], validate_only=False) == (0, None)
