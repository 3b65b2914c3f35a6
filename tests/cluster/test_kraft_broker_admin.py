"""Admin requests sent to a broker of a grete KRaft cluster (three brokers, one grete controller)
answer as the controller decides, as Kafka 4.3.1's brokers forward them: a validating request
(``validate_only``) included, whose answer must be the one the real change would get."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster

pytestmark = pytest.mark.slow

IAC = IncrementalAlterConfigsRequest
BROKER, SET, DELETE = 4, 0, 1


@pytest.fixture(scope="module")
def kraft_cluster() -> Iterator[GreteCluster]:
    with cluster(3, controllers=1) as running:
        yield running


def _alter(wire: Wire, name: str, op: int, value: str | None, validate_only: bool) -> tuple[int, str | None]:
    resource = IAC.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
        IAC.AlterableConfig(name="min.insync.replicas", config_operation=op, value=value)])
    (answer,) = wire.call(IAC(resources=[resource], validate_only=validate_only),
                          IncrementalAlterConfigsResponse, 1).responses
    return answer.error_code, answer.error_message


def _cluster_default(wire: Wire) -> str | None:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name="", configuration_keys=["min.insync.replicas"])])
    (result,) = wire.call(request, DescribeConfigsResponse, 4).results
    return next((c.value for c in result.configs if c.name == "min.insync.replicas"), None)


@pytest.mark.parametrize("validate_only", [True, False])
def test_min_insync_replicas_follows_the_controllers_eligible_leader_replica_rules(
        kraft_cluster: GreteCluster, validate_only: bool) -> None:
    first = kraft_cluster.brokers[1]
    wire = Wire(first.host, first.port)
    try:
        assert _alter(wire, "1", SET, "1", validate_only) == (
            ErrorCode.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
        assert _alter(wire, "", DELETE, None, validate_only) == (
            ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
        before = _cluster_default(wire)
        assert _alter(wire, "", SET, "2", validate_only=True) == (ErrorCode.NONE, None)
        assert _cluster_default(wire) == before  # validated only: nothing changed
    finally:
        wire.close()
