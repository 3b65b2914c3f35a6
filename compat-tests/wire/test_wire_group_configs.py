"""Group configs (ConfigResource GROUP, Kafka 4) through both alter APIs: the same raw requests
against Kafka 4.3.1 and grete. Kafka 4.3's controller takes a GROUP resource in the legacy
AlterConfigs too (the configs become the group's whole set), and refuses the empty name in both."""

from __future__ import annotations

import sys
import time
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
)
from grete.testing._wire import Wire  # noqa: E402

GROUP, GROUP_CONFIG = 32, 8
SET = 0
DEFAULT_GROUP = (ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 3.9 has no GROUP config resource")


def incremental(wire: Wire, group: str, ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    IAC = IncrementalAlterConfigsRequest
    (r,) = wire.call(IAC(resources=[IAC.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])]),
        IncrementalAlterConfigsResponse, 1).responses
    return r.error_code, r.error_message


def legacy(wire: Wire, group: str, configs: dict[str, str], validate_only: bool = False) -> tuple[int, str | None]:
    A = AlterConfigsRequest
    (r,) = wire.call(A(resources=[A.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        A.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=validate_only),
        AlterConfigsResponse, 2).responses
    return r.error_code, r.error_message


def overrides(wire: Wire, group: str) -> dict[str, str | None]:
    R = DescribeConfigsRequest.DescribeConfigsResource
    (r,) = wire.call(DescribeConfigsRequest(resources=[R(resource_type=GROUP, resource_name=group,
                                                         configuration_keys=None)]), DescribeConfigsResponse, 4).results
    assert r.error_code == 0, r.error_message
    return {c.name: c.value for c in r.configs if c.config_source == GROUP_CONFIG}


def await_overrides(wire: Wire, group: str, expected: dict[str, str | None]) -> None:
    deadline = time.monotonic() + 30  # Kafka's broker applies the controller's record a moment later
    while overrides(wire, group) != expected:
        assert time.monotonic() < deadline, f"{group} never described as {expected}"
        time.sleep(0.1)


def test_legacy_alter_configs_replaces_a_groups_set(wire):
    group = "gc-" + uuid.uuid4().hex[:8]
    assert incremental(wire, group, [("consumer.session.timeout.ms", SET, "50000"),
                                     ("share.auto.offset.reset", SET, "earliest")]) == (0, None)
    await_overrides(wire, group, {"consumer.session.timeout.ms": "50000", "share.auto.offset.reset": "earliest"})
    assert legacy(wire, group, {"nope": "1"}) == (ErrorCode.INVALID_CONFIG, "Unknown group config name: nope")
    assert legacy(wire, group, {"share.record.lock.duration.ms": "20000"}, validate_only=True) == (0, None)
    assert legacy(wire, group, {"share.record.lock.duration.ms": "20000"}) == (0, None)
    await_overrides(wire, group, {"share.record.lock.duration.ms": "20000"})
    assert legacy(wire, group, {}) == (0, None)
    await_overrides(wire, group, {})


def test_the_default_group_resource_is_refused(wire):
    assert incremental(wire, "", [("consumer.session.timeout.ms", SET, "50000")]) == DEFAULT_GROUP
    assert legacy(wire, "", {"consumer.session.timeout.ms": "50000"}) == DEFAULT_GROUP
