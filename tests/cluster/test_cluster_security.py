"""Security state in a ZooKeeper cluster, kept where Kafka 3.9 keeps it: SCRAM credentials in
/config/users/<user>, ACLs in /kafka-acl (literal) and /kafka-acl-extended/prefixed, each change
announced so every broker's authorizer sees it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
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
from grete.testing.cluster import GreteCluster, cluster
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
    assert b"Topic:orders" in literal_changes
    other = AdminClient({"bootstrap.servers": grete_cluster.brokers[2].bootstrap_servers})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    wait_until(lambda: len(other.describe_acls(everything).result(10)) == 2, what="the ACLs on the other broker")
    for future in client.delete_acls([everything]).values():
        future.result(10)
    assert zk.exists("/kafka-acl/Topic/orders") is None
    wait_until(lambda: other.describe_acls(everything).result(10) == [], what="the deletion on the other broker")
