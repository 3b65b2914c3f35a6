"""DescribeConfigs details a Kafka 4.3 user sees with kafka-configs --describe --all (run side by
side with Kafka 4.3.1, docs/compatibility.md): the defaults Kafka 4 changed, keys whose value
Kafka leaves null, broker.id, and the result's empty-string message. The same raw requests against
Kafka 4.3.1 and grete.

The reference runs with its own server.properties (node.id=1, one recovery thread), so only the
parts that do not depend on it are compared: the DEFAULT_CONFIG synonym, broker.id == node.id."""

from __future__ import annotations

import sys
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
)
from grete.testing._wire import Wire  # noqa: E402

TOPIC, BROKER = 2, 4
DEFAULT_CONFIG = 5
Resource = DescribeConfigsRequest.DescribeConfigsResource

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4's defaults (num.recovery.threads.per.data.dir=2)")


def describe(wire: Wire, rtype: int, name: str, keys: list[str]) -> DescribeConfigsResponse.DescribeConfigsResult:
    request = DescribeConfigsRequest(resources=[Resource(resource_type=rtype, resource_name=name, configuration_keys=keys)],
                                     include_synonyms=True)
    (result,) = wire.call(request, DescribeConfigsResponse, 4).results
    return result


def test_broker_defaults_and_null_values(wire):
    node = str(wire.call(DescribeClusterRequest(), DescribeClusterResponse, 0).brokers[0].broker_id)
    keys = ["broker.id", "log.retention.ms", "log.roll.ms", "log.flush.interval.ms",
            "num.recovery.threads.per.data.dir"]
    result = describe(wire, BROKER, node, keys)
    assert (result.error_code, result.error_message) == (0, "")
    entries = {c.name: c for c in result.configs}
    assert sorted(entries) == sorted(keys)
    # Set nowhere: null, without the value log.retention.hours / log.roll.hours would give it.
    for key in ("log.retention.ms", "log.roll.ms", "log.flush.interval.ms"):
        assert (entries[key].value, entries[key].config_source, entries[key].synonyms) == (None, DEFAULT_CONFIG, []), key
    recovery = entries["num.recovery.threads.per.data.dir"].synonyms[-1]
    assert (recovery.name, recovery.value, recovery.source) == ("num.recovery.threads.per.data.dir", "2", DEFAULT_CONFIG)
    broker_id = entries["broker.id"]
    assert broker_id.value == node
    assert [(s.name, s.value, s.source) for s in broker_id.synonyms][-1] == ("broker.id", "-1", DEFAULT_CONFIG)


def test_result_message_is_empty_not_null(wire, fresh_topic):
    found = describe(wire, TOPIC, fresh_topic, ["retention.ms"])
    assert (found.error_code, found.error_message, [c.name for c in found.configs]) == (0, "", ["retention.ms"])
    missing = describe(wire, TOPIC, fresh_topic + "-absent", ["retention.ms"])
    assert (missing.error_code, missing.error_message, missing.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "", [])
