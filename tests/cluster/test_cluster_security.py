"""Security state in a ZooKeeper cluster, kept where Kafka 3.9 keeps it: SCRAM credentials in
/config/users/<user>, ACLs in /kafka-acl (literal) and /kafka-acl-extended/prefixed, each change
announced so every broker's authorizer sees it."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from grete.coordinator.zookeeper import zk_layout as zkl
from grete.protocol.messages import DescribeAclsRequest, DescribeAclsResponse
from grete.testing import _wire
from grete.testing.cluster import GreteCluster, cluster
from grete.testing.process import BrokerProcess
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    # The authorizer on; PLAINTEXT clients (and the brokers' own requests) are User:ANONYMOUS.
    overrides = {**CLUSTER_OVERRIDES, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "super.users": "User:ANONYMOUS"}
    with cluster(2, overrides=overrides) as running:
        yield running


def test_scram_credentials_in_config_users(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    client = AdminClient({"bootstrap.servers": grete_cluster.brokers[1].bootstrap_servers})
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"alice-secret")
    for future in client.alter_user_scram_credentials([upsert]).values():
        future.result(10)
    stored = json.loads(zk.get("/config/users/alice")[0])
    salt, stored_key, server_key, iterations = zkl.decode_scram(stored["config"]["SCRAM-SHA-256"])
    assert iterations == 8192 and len(stored_key) == 32 and len(server_key) == 32 and salt
    assert "alice-secret" not in json.dumps(stored)
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "users/alice"} in changes
    other = AdminClient({"bootstrap.servers": grete_cluster.brokers[2].bootstrap_servers})

    def described() -> bool:
        found = other.describe_user_scram_credentials(["alice"])["alice"].result(10)
        return [i.mechanism for i in found.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_256]
    wait_until(described, what="the credential on the other broker")


def test_acls_in_kafka_acl_znodes(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    client = AdminClient({"bootstrap.servers": grete_cluster.brokers[1].bootstrap_servers})
    literal = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.GROUP, "team-", ResourcePatternType.PREFIXED, "User:bob", "*",
                          AclOperation.READ, AclPermissionType.ALLOW)
    for future in client.create_acls([literal, prefixed]).values():
        future.result(10)
    assert json.loads(zk.get("/kafka-acl/Topic/orders")[0]) == {"version": 1, "acls": [
        {"principal": "User:bob", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Group/team-")[0])["acls"][0]["operation"] == "Read"
    literal_changes = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
    assert b"TOPIC:orders" in literal_changes  # as Kafka 3.9 writes it
    # The cluster's first change in each notification root: every broker applies it (each asked
    # alone; an admin client would ask whichever broker it likes).
    brokers = sorted(grete_cluster.brokers.items())
    _until_every_broker(brokers, lambda found: len(found) == 2, "the ACLs")
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    for future in client.delete_acls([everything]).values():
        future.result(10)
    assert zk.exists("/kafka-acl/Topic/orders") is None
    _until_every_broker(brokers, lambda found: found == set(), "the deletion")


def _acls_on(broker: BrokerProcess) -> set[tuple[int, str, int]]:
    """(resource type, name, pattern type) of every ACL one broker's authorizer holds, asked of that
    broker alone (an admin client sends DescribeAcls to whichever broker it likes)."""
    request = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                  principal_filter=None, host_filter=None, operation=1, permission_type=1)
    answer = _wire.call(broker.host, broker.port, request, DescribeAclsResponse, 3)
    return {(r.resource_type, r.resource_name, r.pattern_type) for r in answer.resources}


def _until_every_broker(brokers: list[tuple[int, BrokerProcess]], done: Callable[[set[tuple[int, str, int]]], bool],
                        what: str) -> None:
    for n, broker in brokers:
        wait_until(functools.partial(lambda b: done(_acls_on(b)), broker), what=f"{what} on broker {n}")


def test_every_broker_follows_acl_changes_in_both_spellings(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """Changes written as Kafka 3.9 writes them (``kafka-acls --authorizer-properties
    zookeeper.connect=...``, or a Kafka broker of the cluster: TOPIC:name, "resourceType": "TOPIC")
    reach every broker, as grete's own do (the cluster's first: the test above)."""
    brokers = sorted(grete_cluster.brokers.items())
    client = AdminClient({"bootstrap.servers": brokers[0][1].bootstrap_servers})
    binding = AclBinding(ResourceType.TOPIC, "sec-", ResourcePatternType.PREFIXED, "User:carol", "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)
    for future in client.create_acls([binding]).values():
        future.result(10)
    wanted = {(2, "sec-", 4)}
    _until_every_broker(brokers, lambda found: found >= wanted, "the prefixed ACL")
    entry = {"principal": "User:eve", "permissionType": "Allow", "operation": "Read", "host": "*"}
    zk.create("/kafka-acl/Topic/zkacl", json.dumps({"version": 1, "acls": [entry]}).encode(), makepath=True)
    zk.create("/kafka-acl-changes/acl_changes_", b"TOPIC:zkacl", sequence=True)
    zk.create("/kafka-acl-extended/prefixed/Group/zk-", json.dumps({"version": 1, "acls": [entry]}).encode(),
              makepath=True)
    zk.create("/kafka-acl-extended-changes/acl_changes_", json.dumps(
        {"version": 1, "resourceType": "GROUP", "name": "zk-", "patternType": "PREFIXED"}).encode(), sequence=True)
    wanted |= {(2, "zkacl", 3), (3, "zk-", 4)}
    _until_every_broker(brokers, lambda found: found >= wanted, "the ACLs written to ZooKeeper")
    changes = [zk.get(f"/kafka-acl-extended-changes/{c}")[0] for c in zk.get_children("/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "TOPIC", "name": "sec-", "patternType": "PREFIXED"} in [
        json.loads(c) for c in changes]  # Kafka 3.9's spelling, which it reads as well
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    for future in client.delete_acls([everything]).values():
        future.result(10)
    _until_every_broker(brokers, lambda found: found == set(), "the deletions")


def test_both_scram_mechanisms_in_one_request(grete_cluster: GreteCluster) -> None:
    """Kafka 3.9's ZooKeeper mode takes a user's two mechanisms in one request (`kafka-configs
    --add-config 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'`) and refuses one mechanism named twice;
    Kafka 4 refuses a user named twice."""
    client = AdminClient({"bootstrap.servers": grete_cluster.brokers[1].bootstrap_servers})
    both = [UserScramCredentialUpsertion("dora", ScramCredentialInfo(mechanism, 8192), b"dora-secret")
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in client.alter_user_scram_credentials(both).values():
        future.result(10)
    found = client.describe_user_scram_credentials(["dora"])["dora"].result(10)
    assert sorted(i.mechanism for i in found.scram_credential_infos) == [ScramMechanism.SCRAM_SHA_256,
                                                                         ScramMechanism.SCRAM_SHA_512]
    twice = [both[0], both[0]]
    with pytest.raises(KafkaException) as refused:
        for future in client.alter_user_scram_credentials(twice).values():
            future.result(10)
    assert refused.value.args[0].code() == KafkaError.DUPLICATE_RESOURCE
