"""Delegation tokens against the session's target (grete, or Apache Kafka as the oracle): the four
APIs at the wire with Kafka's error codes and times, SCRAM ``tokenauth`` logins at the wire (both
SCRAM mechanisms) whose principal is the token's owner, and Kafka's own tools: a token created with
``kafka-delegation-tokens`` and used by Java's kafka-clients (``ScramLoginModule ... tokenauth="true"``)
to produce and consume under its owner's ACLs. The secure broker runs with
``delegation.token.secret.key`` = conftest's TOKEN_SECRET."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grete.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.errors import ErrorCode as E
from grete.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    MetadataRequest,
    MetadataResponse,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from grete.testing._wire import Wire
from tests.security.scram_client import scram_login
from tools import kafka_dist

SecureBroker = Any  # compat-tests/security/conftest.py's SecureBroker (conftests are not importable)
SECRET = "grete-token-secret"  # conftest.TOKEN_SECRET
PREFIX = "dtok-"
HOST = "127.0.0.1"
Renewer = CreateDelegationTokenRequest.CreatableRenewers
Owner = DescribeDelegationTokenRequest.DescribeDelegationTokenOwner


def _wait(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds}s for {what}"
        time.sleep(0.1)


def _alice_acls(admin: Wire) -> int:
    request = DescribeAclsRequest(resource_type_filter=ResourceType.ANY, resource_name_filter=PREFIX,
                                  pattern_type_filter=PatternType.PREFIXED, principal_filter="User:alice",
                                  host_filter=None, operation=AclOperation.ANY, permission_type=AclPermissionType.ANY)
    return sum(len(r.acls) for r in admin.call(request, DescribeAclsResponse, 3).resources)


@pytest.fixture(scope="module")
def tokens(secure_broker: SecureBroker) -> Iterator[SecureBroker]:
    """alice may do anything on topics and groups named dtok-*; nobody else has ACLs there."""
    admin = secure_broker.login("admin")
    try:
        creations = [CreateAclsRequest.AclCreation(
            resource_type=res, resource_name=PREFIX, resource_pattern_type=PatternType.PREFIXED,
            principal="User:alice", host="*", operation=AclOperation.ALL, permission_type=AclPermissionType.ALLOW)
            for res in (ResourceType.TOPIC, ResourceType.GROUP)]
        created = admin.call(CreateAclsRequest(creations=creations), CreateAclsResponse, 3)
        assert [r.error_code for r in created.results] == [0, 0], created
        _wait(lambda: _alice_acls(admin) == 2, "the ACLs")
    finally:
        admin.close()
    yield secure_broker


def create(wire: Wire, *, renewers: tuple[str, ...] = (), owner: str = "", max_lifetime_ms: int = -1,
           renewer_type: str = "User") -> Any:
    return wire.call(CreateDelegationTokenRequest(
        owner_principal_type="User" if owner else None, owner_principal_name=owner or None,
        renewers=[Renewer(principal_type=renewer_type, principal_name=r) for r in renewers],
        max_lifetime_ms=max_lifetime_ms), CreateDelegationTokenResponse, 3)


def describe(wire: Wire, owners: list[str] | None = None) -> Any:
    return wire.call(DescribeDelegationTokenRequest(
        owners=None if owners is None else [Owner(principal_type="User", principal_name=o) for o in owners]),
        DescribeDelegationTokenResponse, 3)


def listed(wire: Wire, token_id: str, owners: list[str] | None = None) -> list[Any]:
    answer = describe(wire, owners)
    assert answer.error_code == 0, answer
    return [t for t in answer.tokens if t.token_id == token_id]


def visible(wire: Wire, token_id: str, owners: list[str] | None = None) -> list[Any]:
    """The token as ``wire``'s principal describes it, once it has reached the broker (on Kafka the
    controller's record reaches the broker's cache asynchronously)."""
    _wait(lambda: bool(listed(wire, token_id, owners)), f"token {token_id} to be described")
    return listed(wire, token_id, owners)


def renew(wire: Wire, token_hmac: bytes, period: int) -> Any:
    return wire.call(RenewDelegationTokenRequest(hmac=token_hmac, renew_period_ms=period),
                     RenewDelegationTokenResponse, 2)


def expire(wire: Wire, token_hmac: bytes, period: int) -> Any:
    return wire.call(ExpireDelegationTokenRequest(hmac=token_hmac, expiry_time_period_ms=period),
                     ExpireDelegationTokenResponse, 2)


def test_token_lifecycle(tokens: SecureBroker) -> None:
    alice, bob, admin = tokens.login("alice"), tokens.login("bob"), tokens.login("admin")
    made = create(alice, renewers=("bob",))
    assert made.error_code == 0, made
    assert (made.principal_type, made.principal_name, made.token_requester_principal_name) == ("User", "alice", "alice")
    assert bytes(made.hmac) == hmac.new(SECRET.encode(), made.token_id.encode(), hashlib.sha512).digest()
    assert (made.expiry_timestamp_ms - made.issue_timestamp_ms, made.max_timestamp_ms - made.issue_timestamp_ms) \
        == (86_400_000, 604_800_000)
    token = visible(alice, made.token_id)
    assert len(token) == 1 and bytes(token[0].hmac) == bytes(made.hmac)
    assert (token[0].issue_timestamp, token[0].expiry_timestamp, token[0].max_timestamp) == \
        (made.issue_timestamp_ms, made.expiry_timestamp_ms, made.max_timestamp_ms)
    assert [(r.principal_type, r.principal_name) for r in token[0].renewers] == [("User", "bob")]
    assert len(listed(bob, made.token_id)) == 1  # a renewer describes it without any ACL
    assert describe(alice, owners=[]).tokens == []

    # Renewals: not by a super user who is neither owner nor renewer; capped by expiry.time.ms.
    assert (renew(admin, made.hmac, 1000).error_code, renew(admin, made.hmac, 1000).expiry_timestamp_ms) == \
        (E.DELEGATION_TOKEN_OWNER_MISMATCH, 0)
    before = int(time.time() * 1000)
    renewed = renew(bob, made.hmac, 60_000)
    assert renewed.error_code == 0 and before + 60_000 <= renewed.expiry_timestamp_ms <= time.time() * 1000 + 60_000
    longer = renew(alice, made.hmac, 10 * 86_400_000)
    assert longer.error_code == 0 and longer.expiry_timestamp_ms - time.time() * 1000 <= 86_400_000
    wrong = hmac.new(b"not-the-key", made.token_id.encode(), hashlib.sha512).digest()
    assert (renew(alice, wrong, 1).error_code, renew(alice, wrong, 1).expiry_timestamp_ms) == \
        (E.DELEGATION_TOKEN_NOT_FOUND, 0)
    assert expire(admin, made.hmac, -1).error_code == E.DELEGATION_TOKEN_OWNER_MISMATCH

    # Expire with a period shortens the expiry; with a negative one the token is gone.
    shortened = expire(alice, made.hmac, 30_000)
    assert shortened.error_code == 0 and shortened.expiry_timestamp_ms <= time.time() * 1000 + 30_000
    gone = expire(bob, made.hmac, -1)
    assert gone.error_code == 0 and abs(gone.expiry_timestamp_ms - time.time() * 1000) < 10_000
    _wait(lambda: not listed(alice, made.token_id), "the expired token to leave the broker's cache")
    assert renew(alice, made.hmac, 1).error_code == E.DELEGATION_TOKEN_NOT_FOUND
    assert expire(alice, made.hmac, -1).error_code == E.DELEGATION_TOKEN_NOT_FOUND
    for wire in (alice, bob, admin):
        wire.close()


def test_owners_renewers_and_acls(tokens: SecureBroker) -> None:
    alice, bob, admin = tokens.login("alice"), tokens.login("bob"), tokens.login("admin")
    owner = f"dtok-{uuid.uuid4().hex[:6]}"
    refused = create(alice, owner=owner)
    assert (refused.error_code, refused.principal_name, refused.token_requester_principal_name, refused.token_id,
            bytes(refused.hmac), refused.issue_timestamp_ms) == \
        (E.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, "alice", "", b"", -1)
    assert create(alice, renewers=("devs",), renewer_type="Group").error_code == E.INVALID_PRINCIPAL_TYPE
    made = create(admin, owner=owner)  # the super user may create tokens for anyone
    assert (made.error_code, made.principal_name, made.token_requester_principal_name) == (0, owner, "admin")
    assert len(visible(admin, made.token_id, owners=[owner])) == 1
    assert listed(bob, made.token_id) == []  # neither owner, requester nor renewer, and no ACL
    acl = CreateAclsRequest.AclCreation(
        resource_type=ResourceType.USER, resource_name=f"User:{owner}", resource_pattern_type=PatternType.LITERAL,
        principal="User:bob", host="*", operation=AclOperation.DESCRIBE_TOKENS,
        permission_type=AclPermissionType.ALLOW)
    assert admin.call(CreateAclsRequest(creations=[acl]), CreateAclsResponse, 3).results[0].error_code == 0
    _wait(lambda: len(listed(bob, made.token_id)) == 1, "bob's DESCRIBE_TOKENS on the owner")
    assert listed(bob, made.token_id, owners=["alice"]) == []  # filtered by the owners asked for
    assert expire(admin, made.hmac, -1).error_code == E.DELEGATION_TOKEN_OWNER_MISMATCH
    for wire in (alice, bob, admin):
        wire.close()


def _topic(broker: SecureBroker) -> str:
    name = f"{PREFIX}{uuid.uuid4().hex[:10]}"
    admin = broker.login("admin")
    try:
        answer = admin.call(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, 7)
        assert answer.topics[0].error_code == 0, answer
    finally:
        admin.close()
    return name


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_tokenauth_at_the_wire(tokens: SecureBroker, mechanism: str) -> None:
    alice = tokens.login("alice")
    made = create(alice)
    assert made.error_code == 0, made
    password = base64.b64encode(bytes(made.hmac)).decode()
    visible(alice, made.token_id)
    topic = _topic(tokens)
    wire = Wire(HOST, tokens.sasl_port, timeout=30.0)
    assert scram_login(wire, mechanism, made.token_id, password, tokenauth=True).error_code == 0
    metadata = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                               allow_auto_topic_creation=False)
    # alice's ACLs apply: the session's principal is the token's owner.
    assert wire.call(metadata, MetadataResponse, 12).topics[0].error_code == 0
    assert describe(wire).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert create(wire).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert renew(wire, made.hmac, 1).error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    wire.close()
    bob = tokens.login("bob")
    assert bob.call(metadata, MetadataResponse, 12).topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    bob.close()
    for user, secret, flag in ((made.token_id, "AAAA" + password[4:], True), (made.token_id, password, False)):
        wire = Wire(HOST, tokens.sasl_port, timeout=30.0)
        assert scram_login(wire, mechanism, user, secret, tokenauth=flag).error_code == E.SASL_AUTHENTICATION_FAILED
        wire.close()
    assert expire(alice, made.hmac, -1).error_code == 0
    alice.close()


def test_cli_token_used_by_java_clients(tokens: SecureBroker, tmp_path: Path) -> None:
    """kafka-delegation-tokens creates the token (one JVM); Java's kafka-clients produce and consume
    with it over SCRAM-SHA-512 tokenauth (a second JVM)."""
    version = kafka_dist.PINNED[-1]
    try:
        kafka_dist.harness_classes(version)
    except Exception as exc:
        pytest.skip(f"Kafka {version} tools unavailable: {exc}")
    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required "
                      'username="alice" password="alice-secret";\n')
    made = kafka_dist.run_tool(version, "kafka-delegation-tokens", "--bootstrap-server", tokens.sasl_bootstrap,
                               "--command-config", str(config), "--create", "--max-life-time-period", "-1",
                               "--renewer-principal", "User:bob", timeout=120)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    # "TOKENID  HMAC  OWNER  REQUESTER  RENEWERS  ISSUEDATE  EXPIRYDATE  MAXDATE", then one row.
    lines = [line for line in made.stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["TOKENID", "HMAC"])
    token_id, token_hmac, owner, requester = lines[header + 1].split()[:4]
    assert (owner, requester) == ("User:alice", "User:alice")
    assert base64.b64decode(token_hmac) == hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()

    alice = tokens.login("alice")
    visible(alice, token_id)
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{token_id}" '
            f'password="{token_hmac}" tokenauth="true";')
    done = subprocess.run(kafka_dist.harness_cmd(
        version, "roundtrips", tokens.sasl_bootstrap, _topic(tokens), "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=SCRAM-SHA-512", f"sasl.jaas.config={jaas}"),
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(result) == 1 and result[0].get("error") is None, result
    assert result[0]["offsets"] == [0, 1, 2] and result[0]["values"] == [f"java-0-{n}" for n in range(3)]

    assert expire(alice, base64.b64decode(token_hmac), -1).error_code == 0
    alice.close()


def _closed(wire: Wire) -> bool:
    wire.sock.settimeout(10)
    try:
        return wire.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_token_past_its_expiry(tokens: SecureBroker) -> None:
    """Until the sweep (hourly by default) removes it: still described, renew and a positive expire
    answer 66 EXPIRED, a login succeeds with a session that ends at once (the next request closes
    the connection), a negative expire still removes it."""
    alice = tokens.login("alice")
    made = create(alice, max_lifetime_ms=1500)
    assert made.error_code == 0 and made.expiry_timestamp_ms == made.max_timestamp_ms, made
    visible(alice, made.token_id)
    time.sleep(max(0.0, (made.max_timestamp_ms - time.time() * 1000) / 1000) + 0.5)
    assert len(listed(alice, made.token_id)) == 1
    assert (renew(alice, made.hmac, 1000).error_code, expire(alice, made.hmac, 1000).error_code) == \
        (E.DELEGATION_TOKEN_EXPIRED, E.DELEGATION_TOKEN_EXPIRED)
    wire = Wire(HOST, tokens.sasl_port, timeout=30.0)
    done = scram_login(wire, "SCRAM-SHA-256", made.token_id, base64.b64encode(bytes(made.hmac)).decode(),
                       tokenauth=True)
    assert (done.error_code, done.session_lifetime_ms) == (0, 0)
    wire.send(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)
    assert _closed(wire), "the expired session served a request"
    wire.close()
    assert expire(alice, made.hmac, -1).error_code == 0
    alice.close()
