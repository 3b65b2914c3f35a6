"""Delegation tokens on an in-process broker: the four APIs with Kafka's error codes, the HMAC as Kafka
computes it, SCRAM ``tokenauth`` logins whose principal is the token's owner, the expiry sweep's
timer, and the token's record in the local store and in Kafka 3.9's ZooKeeper JSON."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grete.broker.config import BrokerConfig
from grete.broker.security.delegation_tokens import DelegationTokenManager
from grete.coordinator.kraft.local import open_local_store
from grete.coordinator.metadata import DelegationTokenInfo
from grete.coordinator.zookeeper import zk_layout as zk
from grete.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.errors import ErrorCode as E
from grete.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    MetadataRequest,
    MetadataResponse,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from grete.testing import RunningBroker, broker
from grete.testing._wire import Wire
from tests.security.scram_client import scram_login

SECRET = "token-secret-key"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in USERS.items()) + ";"
OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "delegation.token.secret.key": SECRET,
    "delegation.token.expiry.check.interval.ms": "200",
}
Renewer = CreateDelegationTokenRequest.CreatableRenewers
Owner = DescribeDelegationTokenRequest.DescribeDelegationTokenOwner


def _port(b: RunningBroker, name: str) -> int:
    return next(listener.port for listener in b.broker.bound if listener.name == name)


def login(b: RunningBroker, user: str) -> Wire:
    wire = Wire("127.0.0.1", _port(b, "SASL_PLAINTEXT"))
    assert wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1).error_code == 0
    done = wire.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()),
                     SaslAuthenticateResponse, 1)
    assert done.error_code == 0, done
    return wire


def create(wire: Wire, *, renewers: tuple[str, ...] = (), owner: str = "", max_lifetime_ms: int = -1,
           renewer_type: str = "User") -> Any:
    request = CreateDelegationTokenRequest(
        owner_principal_type="User" if owner else None, owner_principal_name=owner or None,
        renewers=[Renewer(principal_type=renewer_type, principal_name=r) for r in renewers],
        max_lifetime_ms=max_lifetime_ms)
    return wire.call(request, CreateDelegationTokenResponse, 3)


def describe(wire: Wire, owners: list[str] | None = None) -> Any:
    request = DescribeDelegationTokenRequest(
        owners=None if owners is None else [Owner(principal_type="User", principal_name=o) for o in owners])
    return wire.call(request, DescribeDelegationTokenResponse, 3)


def token_ids(answer: Any) -> set[str]:
    assert answer.error_code == 0, answer
    return {t.token_id for t in answer.tokens}


@pytest.fixture(scope="module")
def tb() -> Iterator[RunningBroker]:
    with broker(OVERRIDES, topics={"dt-topic": 1}) as b:
        admin = login(b, "admin")
        acl = CreateAclsRequest.AclCreation(
            resource_type=ResourceType.TOPIC, resource_name="dt-topic", resource_pattern_type=PatternType.LITERAL,
            principal="User:alice", host="*", operation=AclOperation.DESCRIBE,
            permission_type=AclPermissionType.ALLOW)
        assert admin.call(CreateAclsRequest(creations=[acl]), CreateAclsResponse, 3).results[0].error_code == 0
        admin.close()
        yield b


def test_create_describe_renew_expire(tb: RunningBroker) -> None:
    alice, bob, admin = login(tb, "alice"), login(tb, "bob"), login(tb, "admin")
    made = create(alice, renewers=("bob",))
    assert made.error_code == 0, made
    assert (made.principal_type, made.principal_name) == ("User", "alice")
    assert (made.token_requester_principal_type, made.token_requester_principal_name) == ("User", "alice")
    # Kafka's defaults: expiry one day after issue, max lifetime seven days.
    assert made.expiry_timestamp_ms - made.issue_timestamp_ms == 86_400_000
    assert made.max_timestamp_ms - made.issue_timestamp_ms == 604_800_000
    assert bytes(made.hmac) == hmac.new(SECRET.encode(), made.token_id.encode(), hashlib.sha512).digest()

    listed = [t for t in describe(alice).tokens if t.token_id == made.token_id]
    assert len(listed) == 1 and bytes(listed[0].hmac) == bytes(made.hmac)
    assert [(r.principal_type, r.principal_name) for r in listed[0].renewers] == [("User", "bob")]
    assert made.token_id in token_ids(describe(bob))  # a renewer sees it
    assert describe(alice, owners=[]).tokens == []  # an empty owner list asks for nothing

    # Renew: the owner or a renewer only (a super user is neither); the period is capped by expiry.time.
    assert admin.call(RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=1000),
                      RenewDelegationTokenResponse, 2).error_code == E.DELEGATION_TOKEN_OWNER_MISMATCH
    before = int(time.time() * 1000)
    renewed = bob.call(RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=60_000),
                       RenewDelegationTokenResponse, 2)
    assert renewed.error_code == 0
    assert before + 60_000 <= renewed.expiry_timestamp_ms <= int(time.time() * 1000) + 60_000
    assert next(t.expiry_timestamp for t in describe(alice).tokens
                if t.token_id == made.token_id) == renewed.expiry_timestamp_ms

    wrong = hmac.new(b"other-key", made.token_id.encode(), hashlib.sha512).digest()
    assert alice.call(RenewDelegationTokenRequest(hmac=wrong, renew_period_ms=1),
                      RenewDelegationTokenResponse, 2).error_code == E.DELEGATION_TOKEN_NOT_FOUND
    # Expire with a negative period: gone at once.
    gone = alice.call(ExpireDelegationTokenRequest(hmac=made.hmac, expiry_time_period_ms=-1),
                      ExpireDelegationTokenResponse, 2)
    assert gone.error_code == 0 and abs(gone.expiry_timestamp_ms - time.time() * 1000) < 5000
    assert made.token_id not in token_ids(describe(alice))
    assert alice.call(RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=1),
                      RenewDelegationTokenResponse, 2).error_code == E.DELEGATION_TOKEN_NOT_FOUND
    for wire in (alice, bob, admin):
        wire.close()


def test_refused_over_plaintext(tb: RunningBroker) -> None:
    plain = Wire("127.0.0.1", _port(tb, "PLAINTEXT"))
    assert create(plain).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert describe(plain).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    answer = plain.call(RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=1), RenewDelegationTokenResponse, 2)
    assert (answer.error_code, answer.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
    answer = plain.call(ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=1),
                        ExpireDelegationTokenResponse, 2)
    assert (answer.error_code, answer.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
    plain.close()


def test_owner_principal_and_describe_acls(tb: RunningBroker) -> None:
    alice, bob, admin = login(tb, "alice"), login(tb, "bob"), login(tb, "admin")
    refused = create(alice, owner="carol")
    assert refused.error_code == E.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert (refused.principal_name, refused.token_requester_principal_name, refused.token_id) == ("carol", "alice", "")
    assert create(alice, renewers=("devs",), renewer_type="Group").error_code == E.INVALID_PRINCIPAL_TYPE
    made = create(admin, owner="carol")  # a super user may create for anyone
    assert made.error_code == 0 and made.principal_name == "carol" and made.token_requester_principal_name == "admin"
    assert made.token_id in token_ids(describe(admin, owners=["carol"]))  # the requester sees it
    assert made.token_id not in token_ids(describe(bob))
    acl = CreateAclsRequest.AclCreation(
        resource_type=ResourceType.USER, resource_name="User:carol", resource_pattern_type=PatternType.LITERAL,
        principal="User:bob", host="*", operation=AclOperation.DESCRIBE_TOKENS,
        permission_type=AclPermissionType.ALLOW)
    assert admin.call(CreateAclsRequest(creations=[acl]), CreateAclsResponse, 3).results[0].error_code == 0
    assert made.token_id in token_ids(describe(bob, owners=["carol"]))
    assert made.token_id not in token_ids(describe(bob, owners=["alice"]))
    for wire in (alice, bob, admin):
        wire.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_tokenauth_login_is_the_owner(tb: RunningBroker, mechanism: str) -> None:
    alice = login(tb, "alice")
    made = create(alice)
    alice.close()
    password = base64.b64encode(bytes(made.hmac)).decode()
    wire = Wire("127.0.0.1", _port(tb, "SASL_PLAINTEXT"))
    assert scram_login(wire, mechanism, made.token_id, password, tokenauth=True).error_code == 0
    # The principal is User:alice: her DESCRIBE ACL on dt-topic applies (bob has none).
    seen = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="dt-topic")],
                                     allow_auto_topic_creation=False), MetadataResponse, 12)
    assert seen.topics[0].error_code == 0
    # A token-authenticated connection may not manage tokens.
    assert describe(wire).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert create(wire).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    wire.close()
    bob = login(tb, "bob")
    assert bob.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="dt-topic")],
                                    allow_auto_topic_creation=False), MetadataResponse, 12).topics[0].error_code \
        == E.TOPIC_AUTHORIZATION_FAILED
    bob.close()
    # A wrong password, an unknown token id, and a token id without the extension all fail.
    for user, secret, flag in ((made.token_id, password[:-4] + "AAA=", True), ("no-such-token", password, True),
                               (made.token_id, password, False)):
        wire = Wire("127.0.0.1", _port(tb, "SASL_PLAINTEXT"))
        assert scram_login(wire, mechanism, user, secret, tokenauth=flag).error_code == E.SASL_AUTHENTICATION_FAILED
        wire.close()


def test_expired_tokens_are_swept_by_the_timer(tb: RunningBroker) -> None:
    alice = login(tb, "alice")
    made = create(alice, max_lifetime_ms=1500)
    assert made.error_code == 0 and made.max_timestamp_ms - made.issue_timestamp_ms == 1500
    assert made.expiry_timestamp_ms == made.max_timestamp_ms  # the lifetime caps the first expiry
    assert made.token_id in token_ids(describe(alice))
    deadline = time.monotonic() + 10
    while made.token_id in token_ids(describe(alice)):
        assert time.monotonic() < deadline, "the expired token was never swept"
        time.sleep(0.1)
    assert time.time() * 1000 > made.max_timestamp_ms  # not before it expired
    alice.close()


def test_disabled_without_a_secret_key() -> None:
    """Kafka 4.3.1's answers, recorded once against a reference node without the key: 61 with the
    owner and requester filled in and every time 0."""
    overrides = {k: v for k, v in OVERRIDES.items() if not k.startswith("delegation.")}
    with broker(overrides) as b:
        alice = login(b, "alice")
        made = create(alice)
        assert made.error_code == E.DELEGATION_TOKEN_AUTH_DISABLED
        assert (made.principal_name, made.issue_timestamp_ms, made.token_id, bytes(made.hmac)) == ("alice", 0, "", b"")
        assert describe(alice).error_code == E.DELEGATION_TOKEN_AUTH_DISABLED
        answer = alice.call(ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=-1),
                            ExpireDelegationTokenResponse, 2)
        assert (answer.error_code, answer.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_AUTH_DISABLED, 0)
        alice.close()


def test_tokens_persist_in_the_local_store(tmp_path: Path) -> None:
    token = DelegationTokenInfo("tok-1", "User:alice", "User:admin", ("User:bob",), 1, 3, 2)
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.set_delegation_token(token))
    assert open_local_store(tmp_path, 1).delegation_tokens() == {"tok-1": token}
    asyncio.run(store.remove_delegation_token("tok-1"))
    assert open_local_store(tmp_path, 1).delegation_tokens() == {}


def test_zookeeper_json_as_kafka_39_writes_it() -> None:
    # As DelegationTokenManagerZk.toJsonCompatibleMap writes it (principals sanitized).
    kafka = (b'{"owner":"User%3Aalice","renewers":["User%3Abob"],"tokenRequester":"User%3Aadmin",'
             b'"maxTimestamp":1700604800000,"issueTimestamp":1700000000000,"version":3,'
             b'"tokenId":"Kp7uS_0mTBqbLfXv3yXr2A","expiryTimestamp":1700086400000}')
    token = zk.decode_delegation_token(kafka)
    assert token == DelegationTokenInfo("Kp7uS_0mTBqbLfXv3yXr2A", "User:alice", "User:admin", ("User:bob",),
                                        1700000000000, 1700604800000, 1700086400000)
    assert zk.decode_delegation_token(zk.encode_delegation_token(token)) == token
    # Version 1 (before KIP-373's requester): the requester is the owner.
    old = b'{"owner":"User%3Aalice","renewers":[],"maxTimestamp":3,"issueTimestamp":1,"version":1,' \
          b'"tokenId":"t","expiryTimestamp":2}'
    decoded = zk.decode_delegation_token(old)
    assert decoded is not None and decoded.requester == "User:alice"
    assert zk.delegation_token_path("t") == "/delegation_token/tokens/t"


def test_secret_key_is_never_described_and_master_key_is_its_old_name(tb: RunningBroker, tmp_path: Path) -> None:
    admin = login(tb, "admin")
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name=str(tb.broker.node_id),
        configuration_keys=["delegation.token.secret.key", "delegation.token.expiry.check.interval.ms"])])
    configs = {c.name: c for c in admin.call(request, DescribeConfigsResponse, 4).results[0].configs}
    admin.close()
    secret = configs["delegation.token.secret.key"]
    assert (secret.value, secret.is_sensitive) == (None, True)
    assert configs["delegation.token.expiry.check.interval.ms"].value == "200"
    old = DelegationTokenManager(BrokerConfig({"delegation.token.master.key": "old-key"}), open_local_store(tmp_path, 1))
    assert old.enabled and old.hmac_of("t") == hmac.new(b"old-key", b"t", hashlib.sha512).digest()
    assert not DelegationTokenManager(BrokerConfig({"delegation.token.secret.key": ""}),
                                      open_local_store(tmp_path, 1)).enabled
