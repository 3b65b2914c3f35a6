"""Client-metrics subscriptions (KIP-714, ConfigResource type 16), as kafka-client-metrics.sh manages
them: IncrementalAlterConfigs / AlterConfigs checks and messages, the stored forms DescribeConfigs
shows, and ListConfigResources v0/v1. The same raw requests against Kafka 4.3.1 and grete. Each test uses its own subscription names; the
session's broker is shared."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from grete.testing._wire import Wire  # noqa: E402

CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2
DEFAULT_CONFIG, CLIENT_METRICS_CONFIG = 5, 7
INT, LIST = 3, 7
IAC = IncrementalAlterConfigsRequest
INVALID_REQUEST, INVALID_CONFIG = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="measured against Kafka 4.3.1 (KRaft)")


def name() -> str:
    return f"cm-{uuid.uuid4().hex[:10]}"


def alter(wire: Wire, subscription: str, ops: list[tuple[str, int, str | None]],
          validate_only: bool = False) -> tuple[int, str | None]:
    resource = IAC.AlterConfigsResource(resource_type=CLIENT_METRICS, resource_name=subscription, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
    (r,) = wire.call(IAC(resources=[resource], validate_only=validate_only), IncrementalAlterConfigsResponse, 1).responses
    return r.error_code, r.error_message


def described(wire: Wire, subscription: str) -> tuple[int, str | None, list[tuple[object, ...]]]:
    resource = DescribeConfigsRequest.DescribeConfigsResource(resource_type=CLIENT_METRICS, resource_name=subscription,
                                                             configuration_keys=None)
    (r,) = wire.call(DescribeConfigsRequest(resources=[resource], include_synonyms=True, include_documentation=True),
                     DescribeConfigsResponse, 4).results
    return r.error_code, r.error_message, [
        (c.name, c.value, c.read_only, c.config_source, c.config_type, [(s.name, s.value, s.source) for s in c.synonyms],
         c.documentation) for c in r.configs]


def listed(wire: Wire, version: int) -> set[str]:
    request = ListConfigResourcesRequest(resource_types=[CLIENT_METRICS]) if version else ListConfigResourcesRequest()
    r = wire.call(request, ListConfigResourcesResponse, version)
    assert r.error_code == 0
    assert {c.resource_type for c in r.config_resources} <= {CLIENT_METRICS}
    return {c.resource_name for c in r.config_resources}


@pytest.mark.parametrize("ops, expected", [
    ([("foo", SET, "1")], (INVALID_REQUEST, "Unknown client metrics configuration: foo")),
    ([("foo", SET, "1"), ("interval.ms", SET, "5")], (INVALID_REQUEST, "Unknown client metrics configuration: foo")),
    ([("interval.ms", SET, "50")],
     (INVALID_REQUEST, "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)")),
    ([("interval.ms", SET, "3600001")],
     (INVALID_REQUEST, "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)")),
    ([("interval.ms", SET, "abc")], (INVALID_CONFIG, "Invalid value abc for configuration interval.ms: Not a number of type INT")),
    ([("interval.ms", SET, None)], (INVALID_REQUEST, "Null value not supported for : interval.ms")),
    ([("match", SET, "foo=bar")], (INVALID_CONFIG, "Illegal client matching pattern: foo=bar")),
    ([("match", SET, "client_id=[")], (INVALID_CONFIG, "Illegal client matching pattern: client_id=[")),
    ([("match", SET, "client_id")], (INVALID_CONFIG, "Illegal client matching pattern: client_id")),
    ([("match", SET, "client_id=")], (INVALID_CONFIG, "Illegal client matching pattern: client_id=")),
    ([("match", SET, "client_id=a=b")], (INVALID_CONFIG, "Illegal client matching pattern: client_id=a=b")),
    ([("match", SET, "client_id=a,")], (INVALID_CONFIG, "Configuration 'match' values must not be empty.")),
    ([("metrics", APPEND, "a.b")], (INVALID_CONFIG, "Can't APPEND to key metrics because its type is not LIST.")),
    # Accepted: the selector's value is a regex only (no check of the uuid or the port), Java's
    # named groups, several patterns for one selector, an empty list, DELETE of an unknown key.
    ([("match", SET, "client_instance_id=notauuid,client_source_port=abc,client_source_address=1.2.3.4,"
      "client_software_version=1.2")], (0, None)),
    ([("match", SET, "client_id=(?<n>a),client_id=b")], (0, None)),
    ([("metrics", SET, "")], (0, None)),
    ([("metrics", SET, "*"), ("foo", DELETE, None)], (0, None)),
])
def test_alter_checks(wire, ops, expected):
    subscription = name()
    assert alter(wire, subscription, ops, validate_only=True) == expected
    assert subscription not in listed(wire, 1)  # validate_only stores nothing


def test_empty_name(wire):
    assert alter(wire, "", [("interval.ms", SET, "1000")]) == (INVALID_REQUEST, "Subscription name can't be empty")
    assert described(wire, "") == (INVALID_REQUEST, "Client metrics subscription name must not be empty", [])


def test_lifecycle_and_stored_forms(wire):
    subscription = name()
    docs = {"interval.ms": "Metrics push interval in milliseconds", "match": "Client match criteria",
            "metrics": "Telemetry metric name prefix list"}
    assert described(wire, subscription) == (0, "", [  # unknown: the defaults, no error
        ("interval.ms", "300000", False, DEFAULT_CONFIG, INT, [], docs["interval.ms"]),
        ("match", "", False, DEFAULT_CONFIG, LIST, [], docs["match"]),
        ("metrics", "", False, DEFAULT_CONFIG, LIST, [], docs["metrics"])])
    assert alter(wire, subscription, [("metrics", SET, " a.b , c.d "), ("interval.ms", SET, " 1000 "),
                                      ("match", SET, " client_id = abc , client_software_name=java ")]) == (0, None)
    stored = {"interval.ms": "1000", "match": "client_id = abc,client_software_name=java", "metrics": "a.b,c.d"}
    assert described(wire, subscription)[2] == [
        (key, stored[key], False, CLIENT_METRICS_CONFIG, INT if key == "interval.ms" else LIST,
         [(key, stored[key], CLIENT_METRICS_CONFIG)], docs[key]) for key in sorted(stored)]
    assert subscription in listed(wire, 0) and subscription in listed(wire, 1)
    assert alter(wire, subscription, [("interval.ms", DELETE, None), ("match", DELETE, None)]) == (0, None)
    assert [(c[0], c[1], c[3]) for c in described(wire, subscription)[2]] == [
        ("interval.ms", "300000", DEFAULT_CONFIG), ("match", "", DEFAULT_CONFIG), ("metrics", "a.b,c.d", CLIENT_METRICS_CONFIG)]
    # Deleting the last key deletes the subscription.
    assert alter(wire, subscription, [("metrics", DELETE, None)]) == (0, None)
    assert subscription not in listed(wire, 1)


def test_legacy_alter_configs_replaces_the_set(wire):
    subscription = name()
    R = AlterConfigsRequest.AlterConfigsResource
    C = AlterConfigsRequest.AlterableConfig

    def replace(configs: dict[str, str]) -> tuple[int, str | None]:
        (r,) = wire.call(AlterConfigsRequest(resources=[R(resource_type=CLIENT_METRICS, resource_name=subscription,
                                                          configs=[C(name=k, value=v) for k, v in configs.items()])]),
                         AlterConfigsResponse, 2).responses
        return r.error_code, r.error_message

    assert replace({"interval.ms": "1000", "metrics": "x."}) == (0, None)
    assert replace({"metrics": "y."}) == (0, None)
    assert [(c[0], c[1], c[3]) for c in described(wire, subscription)[2]] == [
        ("interval.ms", "300000", DEFAULT_CONFIG), ("match", "", DEFAULT_CONFIG), ("metrics", "y.", CLIENT_METRICS_CONFIG)]
    assert replace({"interval.ms": "99"}) == (
        INVALID_REQUEST, "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    assert replace({}) == (0, None)
    assert subscription not in listed(wire, 0)
