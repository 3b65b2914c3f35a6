"""Stock clients over SASL: produce + consume round trips with confluent-kafka (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), kafka-python, aiokafka, kcat and Java's kafka-clients (one JVM for all
its cases), over SASL_PLAINTEXT and SASL_SSL (the module's test CA), against the session's target.

The users: alice (PLAIN, from the listener's JAAS config), carol (SCRAM-SHA-256) and dave
(SCRAM-SHA-512), whose credentials admin creates with AlterUserScramCredentials, and olive
(OAUTHBEARER, an unsecured JWT whose subject is the principal). The authorizer is on,
so admin grants the four ALL on topics and groups prefixed ``sasl-``; the round trips thus also show
that a stock client's principal is the SASL user."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from grete.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from grete.testing._wire import Wire
from tools import kafka_dist

SecureBroker = Any  # compat-tests/security/conftest.py's SecureBroker (conftests are not importable)
PREFIX = "sasl-"
PASSWORDS = {"alice": "alice-secret", "carol": "carol-secret", "dave": "dave-secret"}
MECHANISM_OF = {"alice": "PLAIN", "carol": "SCRAM-SHA-256", "dave": "SCRAM-SHA-512", "olive": "OAUTHBEARER"}


def unsecured_jwt(subject: str) -> str:
    """Kafka's unsecured JWS: header {"alg":"none"}, the claims, an empty signature."""
    def part(claims: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 3600})}."


def _wait(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds}s for {what}"
        time.sleep(0.1)


def _scram_users(admin: Wire) -> set[str]:
    answer = admin.call(DescribeUserScramCredentialsRequest(users=[]), DescribeUserScramCredentialsResponse, 0)
    return {r.user for r in answer.results if r.credential_infos}


def _acl_count(admin: Wire) -> int:
    request = DescribeAclsRequest(resource_type_filter=ResourceType.ANY, resource_name_filter=PREFIX,
                                  pattern_type_filter=PatternType.PREFIXED, principal_filter=None,
                                  host_filter=None, operation=AclOperation.ANY,
                                  permission_type=AclPermissionType.ANY)
    answer = admin.call(request, DescribeAclsResponse, 3)
    return sum(len(r.acls) for r in answer.resources)


def _upsertion(user: str, mechanism: int) -> AlterUserScramCredentialsRequest.ScramCredentialUpsertion:
    salt = os.urandom(16)
    digest = "sha256" if mechanism == 1 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, PASSWORDS[user].encode(), salt, 4096)
    return AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user, mechanism=mechanism, iterations=4096, salt=salt, salted_password=salted)


@pytest.fixture(scope="module")
def users(secure_broker: SecureBroker) -> Iterator[SecureBroker]:
    admin = secure_broker.login("admin")
    try:
        answer = admin.call(AlterUserScramCredentialsRequest(deletions=[], upsertions=[
            _upsertion("carol", 1), _upsertion("dave", 2)]), AlterUserScramCredentialsResponse, 0)
        assert [r.error_code for r in answer.results] == [0, 0], answer
        creations = [CreateAclsRequest.AclCreation(
            resource_type=res, resource_name=PREFIX, resource_pattern_type=PatternType.PREFIXED,
            principal=f"User:{user}", host="*", operation=AclOperation.ALL, permission_type=AclPermissionType.ALLOW)
            for user in MECHANISM_OF for res in (ResourceType.TOPIC, ResourceType.GROUP)]
        created = admin.call(CreateAclsRequest(creations=creations), CreateAclsResponse, 3)
        assert [r.error_code for r in created.results] == [0] * len(creations), created
        # Both reach the broker's metadata image asynchronously on Kafka.
        _wait(lambda: _scram_users(admin) >= {"carol", "dave"}, "the SCRAM credentials")
        _wait(lambda: _acl_count(admin) == len(creations), "the ACLs")
    finally:
        admin.close()
    yield secure_broker


def new_topic(broker: SecureBroker) -> str:
    name = f"{PREFIX}{uuid.uuid4().hex[:10]}"
    admin = broker.login("admin")
    try:
        answer = admin.call(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, 7)
        assert answer.topics[0].error_code == 0, answer
    finally:
        admin.close()
    return name


def endpoint(broker: SecureBroker, ssl: bool) -> str:
    return broker.sasl_ssl_bootstrap if ssl else broker.sasl_bootstrap


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------

def librdkafka_conf(broker: SecureBroker, user: str, ssl: bool) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": endpoint(broker, ssl),
                            "security.protocol": "SASL_SSL" if ssl else "SASL_PLAINTEXT",
                            "sasl.mechanism": MECHANISM_OF[user]}
    if user in PASSWORDS:
        conf.update({"sasl.username": user, "sasl.password": PASSWORDS[user]})
    else:  # librdkafka's own unsecured JWT builder
        conf.update({"sasl.oauthbearer.config": f"principal={user}", "enable.sasl.oauthbearer.unsecure.jwt": True})
    if ssl:
        conf["ssl.ca.location"] = str(broker.ca)
    return conf


@pytest.mark.parametrize("user,ssl", [("alice", False), ("carol", False), ("dave", False), ("olive", False),
                                      ("dave", True), ("alice", True), ("olive", True)],
                         ids=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "SSL-SCRAM-SHA-512",
                              "SSL-PLAIN", "SSL-OAUTHBEARER"])
def test_confluent_kafka(users: SecureBroker, user: str, ssl: bool) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(users)
    conf = librdkafka_conf(users, user, ssl)
    producer = Producer({**conf, "linger.ms": 5})
    values = [f"{user}-{i}".encode() for i in range(3)]
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"{PREFIX}g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(bytes(message.value()))
    finally:
        consumer.close()
    assert got == values


# --- kafka-python ----------------------------------------------------------------------------------

@pytest.mark.parametrize("user,ssl", [("carol", False), ("olive", False), ("alice", True)],
                         ids=["SCRAM-SHA-256", "OAUTHBEARER", "SSL-PLAIN"])
def test_kafka_python(users: SecureBroker, user: str, ssl: bool) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3.x

    class Token(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return unsecured_jwt(user)

    topic = new_topic(users)
    common: dict[str, Any] = {"bootstrap_servers": endpoint(users, ssl),
                              "security_protocol": "SASL_SSL" if ssl else "SASL_PLAINTEXT",
                              "sasl_mechanism": MECHANISM_OF[user]}
    if user in PASSWORDS:
        common.update(sasl_plain_username=user, sasl_plain_password=PASSWORDS[user])
    else:
        common.update(sasl_oauth_token_provider=Token())
    if ssl:
        common["ssl_cafile"] = str(users.ca)
    producer = kafka.KafkaProducer(**common)
    try:
        offsets = [producer.send(topic, f"kp-{i}".encode(), partition=0).get(timeout=20).offset for i in range(3)]
    finally:
        producer.close()
    assert offsets == [0, 1, 2]
    consumer = kafka.KafkaConsumer(**common, consumer_timeout_ms=10_000, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = [m.value for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [b"kp-0", b"kp-1", b"kp-2"]


# --- aiokafka ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("user,ssl", [("dave", False), ("olive", False), ("alice", True)],
                         ids=["SCRAM-SHA-512", "OAUTHBEARER", "SSL-PLAIN"])
def test_aiokafka(users: SecureBroker, user: str, ssl: bool) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Token(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return unsecured_jwt(user)

    topic = new_topic(users)
    common: dict[str, Any] = {"bootstrap_servers": endpoint(users, ssl),
                              "security_protocol": "SASL_SSL" if ssl else "SASL_PLAINTEXT",
                              "sasl_mechanism": MECHANISM_OF[user]}
    if user in PASSWORDS:
        common.update(sasl_plain_username=user, sasl_plain_password=PASSWORDS[user])
    else:
        common.update(sasl_oauth_token_provider=Token())
    if ssl:
        common["ssl_context"] = create_ssl_context(cafile=str(users.ca))

    async def round_trip() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"aio-{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**common, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            got: list[bytes] = []
            while len(got) < 3:
                message = await asyncio.wait_for(consumer.getone(), 20)
                got.append(message.value)
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == [b"aio-0", b"aio-1", b"aio-2"]


# --- kcat --------------------------------------------------------------------------------------------

needs_kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)")


def kcat(broker: SecureBroker, user: str, ssl: bool, *args: str,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    flags = [f"-X{k}={v}" for k, v in librdkafka_conf(broker, user, ssl).items() if k != "bootstrap.servers"]
    return subprocess.run(["kcat", "-b", endpoint(broker, ssl), *flags, *args], input=input,
                          capture_output=True, text=True, timeout=30)


@needs_kcat
@pytest.mark.parametrize("ssl", [False, True], ids=["PLAIN", "SSL-PLAIN"])
def test_kcat(users: SecureBroker, ssl: bool) -> None:
    topic = new_topic(users)
    done = kcat(users, "alice", ssl, "-P", "-t", topic, "-p", "0", input="one\ntwo\nthree\n")
    assert done.returncode == 0, done.stderr[-2000:]
    done = kcat(users, "alice", ssl, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["one", "two", "three"]


@needs_kcat
def test_kcat_scram_needs_librdkafka_2_6_1(users: SecureBroker, target: str) -> None:
    """Debian's kcat 1.7.1 links librdkafka 2.0.2, whose SCRAM client-final message repeats the client
    nonce (fixed in librdkafka 2.6.1). Kafka 4.x checks the nonce strictly (RFC 5802, CVE-2024-56128)
    and refuses the proof; so does grete. Kafka 3.9.2 still accepts it. A newer kcat passes on all."""
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    if "librdkafka 2.0." not in version and "librdkafka 1." not in version:
        pytest.skip(f"this kcat links a newer librdkafka: {version.splitlines()[3:4]}")
    done = kcat(users, "carol", False, "-L", "-m", "2")
    if target == "kafka-3.9":
        assert done.returncode == 0, done.stderr[-2000:]
        return
    assert done.returncode != 0
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in done.stderr, done.stderr[-2000:]


# --- Java's kafka-clients: every case in one JVM --------------------------------------------------

def java_jaas(user: str) -> str:
    if user == "olive":  # kafka-clients' default OAUTHBEARER login makes an unsecured JWT
        return ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                f'unsecuredLoginStringClaim_sub="{user}";')
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if user == "alice"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    return f'{module} required username="{user}" password="{PASSWORDS[user]}";'


def test_java_client(users: SecureBroker) -> None:
    version = kafka_dist.PINNED[-1]
    try:
        kafka_dist.harness_classes(version)
    except Exception as exc:
        pytest.skip(f"Java harness for kafka-clients {version} unavailable: {exc}")
    cases = [("alice", False), ("carol", False), ("dave", False), ("olive", False), ("dave", True)]
    args: list[str] = []
    for user, ssl in cases:
        args += ["--"] if args else []
        args += [endpoint(users, ssl), new_topic(users),
                 f"security.protocol={'SASL_SSL' if ssl else 'SASL_PLAINTEXT'}",
                 f"sasl.mechanism={MECHANISM_OF[user]}", f"sasl.jaas.config={java_jaas(user)}"]
        if ssl:
            args += ["ssl.truststore.type=PEM", f"ssl.truststore.location={users.ca}"]
    done = subprocess.run(kafka_dist.harness_cmd(version, "roundtrips", *args), capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [line.get("error") for line in lines] == [None] * len(cases), lines
    for i, line in enumerate(lines):
        assert line["offsets"] == [0, 1, 2] and line["values"] == [f"java-{i}-{n}" for n in range(3)], line
