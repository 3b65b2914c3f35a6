"""Admin requests sent to a broker of a grete KRaft cluster (three brokers, one grete controller)
answer as the controller decides, as Kafka 4.3.1's brokers forward them: a validating request
(``validate_only``) included, whose answer must be the one the real change would get, and the
quorum's voter changes (``kafka-metadata-quorum --bootstrap-server``), authorized first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster
from tools.kraft_quorum import wait_for

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


def _deny_alter_on_the_cluster(wire: Wire) -> None:
    """A DENY of ALTER on the cluster for User:ANONYMOUS (the PLAINTEXT test client's principal)."""
    acl = CreateAclsRequest.AclCreation(resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3,
                                        principal="User:ANONYMOUS", host="*", operation=7, permission_type=2)
    answer = wire.call(CreateAclsRequest(creations=[acl]), CreateAclsResponse, 3)
    assert [r.error_code for r in answer.results] == [0]


def _remove_voter(wire: Wire) -> tuple[int, str | None]:
    request = RemoveRaftVoterRequest(cluster_id="", voter_id=1001, voter_directory_id=uuid.UUID(int=1))
    answer = wire.call(request, RemoveRaftVoterResponse, 0)
    return answer.error_code, answer.error_message


def test_a_broker_forwards_voter_changes_to_the_controller_once_authorized() -> None:
    authorizer = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "allow.everyone.if.no.acl.found": "true"}
    with cluster(3, controllers=1, overrides=authorizer, controller_overrides=authorizer) as running:
        first = running.brokers[1]
        wire = Wire(first.host, first.port)
        try:
            versions = wire.call(ApiVersionsRequest(), ApiVersionsResponse, 3)
            assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys} >= {(80, 0, 1), (81, 0, 0)}
            code, _ = _remove_voter(wire)  # the controller's answer: its quorum is static (kraft.version 0)
            assert code not in (ErrorCode.NONE, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            _deny_alter_on_the_cluster(wire)  # for good: the same principal could not delete it
            assert wait_for(lambda: _remove_voter(wire)[0] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED or None, 30,
                            "the ACL in force")
            assert _remove_voter(wire) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        finally:
            wire.close()
