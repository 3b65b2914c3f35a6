"""The ACL authorizer's semantics (Kafka's StandardAuthorizer), ACL filters, and persistence in the
local metadata store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.security.authorizer import AclAuthorizer, configured
from grete.coordinator.kraft.local import open_local_store
from grete.coordinator.metadata import ScramCredential
from grete.protocol.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    InvalidAcl,
    PatternType,
    ResourceType,
    validate_binding,
)

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALLOW, DENY = Perm.ALLOW, Perm.DENY


def acl(name: str, op: AclOperation, perm: AclPermissionType = ALLOW, principal: str = "User:alice",
        pattern: PatternType = Pat.LITERAL, host: str = "*", rtype: ResourceType = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def make(tmp_path: Path, acls: list[AclBinding], **config: str) -> AclAuthorizer:
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.add_acls(acls))
    return AclAuthorizer(BrokerConfig(config), store)


def can(authorizer: AclAuthorizer, op: AclOperation, name: str, principal: str = "User:alice",
        host: str = "10.0.0.1", rtype: ResourceType = Res.TOPIC) -> bool:
    return authorizer.authorize(principal, host, op, rtype, name)


def test_literal_prefixed_and_wildcard(tmp_path: Path) -> None:
    a = make(tmp_path, [acl("orders", Op.WRITE), acl("logs-", Op.READ, pattern=Pat.PREFIXED),
                        acl("*", Op.DESCRIBE, principal="User:bob")])
    assert can(a, Op.WRITE, "orders")
    assert not can(a, Op.READ, "orders")
    assert can(a, Op.READ, "logs-app") and not can(a, Op.READ, "logs")
    assert can(a, Op.DESCRIBE, "anything", principal="User:bob")
    assert not can(a, Op.WRITE, "anything", principal="User:bob")
    assert not can(a, Op.WRITE, "orders", principal="User:carol")  # ACLs exist on it: DENY


def test_deny_wins_and_is_not_implied(tmp_path: Path) -> None:
    a = make(tmp_path, [acl("t", Op.ALL), acl("t", Op.WRITE, DENY), acl("u", Op.READ),
                        acl("u", Op.READ, DENY, principal="User:*")])
    assert can(a, Op.READ, "t") and not can(a, Op.WRITE, "t")
    assert not can(a, Op.READ, "u")  # a DENY for User:* beats alice's ALLOW
    assert can(a, Op.DESCRIBE, "u")  # DENY READ does not deny DESCRIBE... and ALLOW READ implies it


@pytest.mark.parametrize("granted,implied", [
    (Op.READ, Op.DESCRIBE), (Op.WRITE, Op.DESCRIBE), (Op.DELETE, Op.DESCRIBE), (Op.ALTER, Op.DESCRIBE),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)])
def test_implied_operations(tmp_path: Path, granted: AclOperation, implied: AclOperation) -> None:
    a = make(tmp_path, [acl("t", granted)])
    assert can(a, implied, "t")
    assert not can(a, Op.CREATE, "t")


def test_describe_does_not_imply_read(tmp_path: Path) -> None:
    a = make(tmp_path, [acl("t", Op.DESCRIBE), acl("t", Op.DESCRIBE_CONFIGS)])
    assert not can(a, Op.READ, "t") and not can(a, Op.ALTER_CONFIGS, "t")


def test_hosts(tmp_path: Path) -> None:
    a = make(tmp_path, [acl("t", Op.READ, host="10.0.0.1"), acl("t", Op.WRITE, DENY, host="10.0.0.9"),
                        acl("t", Op.WRITE)])
    assert can(a, Op.READ, "t", host="10.0.0.1") and not can(a, Op.READ, "t", host="10.0.0.2")
    assert can(a, Op.WRITE, "t", host="10.0.0.1") and not can(a, Op.WRITE, "t", host="10.0.0.9")


def test_super_users_and_no_acl_default(tmp_path: Path) -> None:
    strict = make(tmp_path / "a", [acl("t", Op.READ, DENY)], **{"super.users": "User:admin;User:ops"})
    assert can(strict, Op.READ, "t", principal="User:admin")   # super users skip even DENY
    assert not can(strict, Op.READ, "other")                    # no ACL at all: denied by default
    lenient = make(tmp_path / "b", [acl("t", Op.READ, principal="User:bob")],
                   **{"allow.everyone.if.no.acl.found": "true"})
    assert can(lenient, Op.WRITE, "other")                      # no ACL on it: allowed
    assert not can(lenient, Op.READ, "t")                       # ACLs exist, none for alice: denied


def test_authorize_any_and_operations(tmp_path: Path) -> None:
    a = make(tmp_path, [acl("t", Op.WRITE), acl("kafka-cluster", Op.DESCRIBE, rtype=Res.CLUSTER)])
    assert a.authorize_any("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not a.authorize_any("User:bob", "h", Op.WRITE, Res.TOPIC)
    assert a.operations("User:alice", "h", Res.TOPIC, "t", (Op.READ, Op.WRITE, Op.DESCRIBE)) == \
        (1 << Op.WRITE) | (1 << Op.DESCRIBE)
    denied = make(tmp_path / "d", [acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)])
    assert not denied.authorize_any("User:alice", "h", Op.WRITE, Res.TOPIC)


def test_changes_reach_the_authorizer_and_survive_a_restart(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1)
    authorizer = AclAuthorizer(BrokerConfig({}), store)
    assert not can(authorizer, Op.READ, "t")
    binding = acl("t", Op.READ)
    asyncio.run(store.add_acls([binding]))
    assert can(authorizer, Op.READ, "t")
    credential = ScramCredential(b"salt", b"stored", b"server", 4096)
    asyncio.run(store.set_scram_credential("alice", "SCRAM-SHA-256", credential))
    reopened = open_local_store(tmp_path, 1)
    assert reopened.acls() == frozenset({binding})
    assert reopened.scram_credential("alice", "SCRAM-SHA-256") == credential
    asyncio.run(store.remove_acls([binding]))
    asyncio.run(store.set_scram_credential("alice", "SCRAM-SHA-256", None))
    assert not can(authorizer, Op.READ, "t")
    assert open_local_store(tmp_path, 1).scram_credentials() == {}


def test_filters() -> None:
    acls = [acl("orders", Op.READ), acl("ord", Op.READ, pattern=Pat.PREFIXED), acl("*", Op.WRITE),
            acl("other", Op.READ, principal="User:bob")]

    def found(resource: str | None, pattern: PatternType, principal: str | None = None) -> list[str]:
        f = AclFilter(Res.TOPIC, resource, pattern, principal, None, Op.ANY, Perm.ANY)
        return sorted(a.resource_name for a in acls if f.matches(a))

    assert found("orders", Pat.MATCH) == ["*", "ord", "orders"]
    assert found("orders", Pat.LITERAL) == ["orders"]
    assert found("ord", Pat.PREFIXED) == ["ord"]
    assert found(None, Pat.ANY) == ["*", "ord", "orders", "other"]
    assert found(None, Pat.ANY, "User:bob") == ["other"]
    with pytest.raises(InvalidAcl):
        AclFilter(Res.UNKNOWN, None, Pat.ANY, None, None, Op.ANY, Perm.ANY).validate()


def test_binding_validation() -> None:
    validate_binding(acl("t", Op.READ))
    for bad in (acl("t", Op.ANY), acl("t", Op.READ, Perm.ANY), acl("t", Op.READ, pattern=Pat.MATCH),
                acl("", Op.READ), acl("t", Op.READ, principal="alice"),
                acl("other", Op.ALTER, rtype=Res.CLUSTER)):
        with pytest.raises(InvalidAcl):
            validate_binding(bad)


def test_authorizer_class_names() -> None:
    assert not configured(BrokerConfig({}))
    assert configured(BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}))
    assert configured(BrokerConfig({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}))
    with pytest.raises(ConfigError, match="StandardAuthorizer"):
        configured(BrokerConfig({"authorizer.class.name": "com.example.Custom"}))
