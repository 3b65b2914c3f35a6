"""SASL listeners and ACLs on a real in-process broker: stock clients (confluent-kafka, kafka-python)
with PLAIN and SCRAM, the wire-level rules of the SASL exchange, and authorization end to end."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
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

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from grete.testing import RunningBroker, broker
from grete.testing._wire import Wire

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
SASL_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}


def _port(b: RunningBroker, name: str) -> int:
    return next(listener.port for listener in b.broker.bound if listener.name == name)


def _sasl_conf(b: RunningBroker, mechanism: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{_port(b, 'SASL_PLAINTEXT')}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **extra}


def _round_trip(conf: dict[str, Any], topic: str, value: bytes) -> bytes:
    producer = Producer(conf)
    producer.produce(topic, value=value, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": f"g-{time.monotonic_ns()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.value() == value:
                return bytes(message.value())
        raise AssertionError("nothing consumed")
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[RunningBroker]:
    with broker(SASL_OVERRIDES, topics={"secure": 1}) as b:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{_port(b, 'PLAINTEXT')}"})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                         b"carol-secret"),
            UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                         b"dave-secret")])
        for future in futures.values():
            future.result(10)
        yield b


@pytest.mark.parametrize("mechanism,user,password", [("PLAIN", "alice", "alice-secret"),
                                                     ("SCRAM-SHA-256", "carol", "carol-secret"),
                                                     ("SCRAM-SHA-512", "dave", "dave-secret")])
def test_confluent_kafka_round_trip(sasl_broker: RunningBroker, mechanism: str, user: str, password: str) -> None:
    value = f"{mechanism}-{user}".encode()
    assert _round_trip(_sasl_conf(sasl_broker, mechanism, user, password), "secure", value) == value


def test_kafka_python_scram_and_plain(sasl_broker: RunningBroker) -> None:
    kafka = pytest.importorskip("kafka")
    for mechanism, user, password in (("SCRAM-SHA-256", "carol", "carol-secret"), ("PLAIN", "bob", "bob-secret")):
        producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{_port(sasl_broker, 'SASL_PLAINTEXT')}",
                                       security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                       sasl_plain_username=user, sasl_plain_password=password)
        try:
            metadata = producer.send("secure", b"kafka-python", partition=0).get(timeout=15)
            assert metadata.offset >= 0
        finally:
            producer.close()


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "carol"),
                                            ("SCRAM-SHA-256", "nobody")])
def test_wrong_credentials_fail_and_others_are_served(sasl_broker: RunningBroker, mechanism: str,
                                                      user: str) -> None:
    errors: list[KafkaError] = []
    bad = Producer(_sasl_conf(sasl_broker, mechanism, user, "wrong", error_cb=errors.append))
    bad.produce("secure", b"x", partition=0)
    # Still queued (librdkafka's count also holds events not yet served, so it may exceed 1).
    assert bad.flush(5) >= 1
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        bad.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert _round_trip(_sasl_conf(sasl_broker, "PLAIN", "bob", "bob-secret"), "secure", b"after") == b"after"


# --- the exchange on the wire -------------------------------------------------------------------
def _closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def test_requests_before_authentication_close_the_connection(sasl_broker: RunningBroker) -> None:
    port = _port(sasl_broker, "SASL_PLAINTEXT")
    wire = Wire("127.0.0.1", port)
    versions = wire.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert advertised[17] == (0, 1) and advertised[36] == (0, 2)
    wire.send(MetadataRequest(topics=None), 1)
    assert _closed(wire.sock)
    # After a handshake only SaslAuthenticate is accepted: anything else is answered with its own
    # error response, ILLEGAL_SASL_STATE, then closed (Kafka's SaslServerAuthenticator).
    for request, response, version in ((ApiVersionsRequest(), ApiVersionsResponse, 0),
                                       (DescribeGroupsRequest(groups=["g"]), DescribeGroupsResponse, 5)):
        wire = Wire("127.0.0.1", port)
        assert wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1).error_code == 0
        answer = wire.call(request, response, version)
        codes = [answer.error_code] if hasattr(answer, "error_code") else [g.error_code for g in answer.groups]
        assert codes == [ErrorCode.ILLEGAL_SASL_STATE], answer
        assert _closed(wire.sock)


def test_unknown_mechanism_and_bad_password_answered_then_closed(sasl_broker: RunningBroker) -> None:
    port = _port(sasl_broker, "SASL_PLAINTEXT")
    wire = Wire("127.0.0.1", port)
    answer = wire.call(SaslHandshakeRequest(mechanism="GSSAPI"), SaslHandshakeResponse, 1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert _closed(wire.sock)
    wire = Wire("127.0.0.1", port)
    wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
    failed = wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00nope"), SaslAuthenticateResponse, 2)
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.error_message and "Invalid username or password" in failed.error_message
    assert _closed(wire.sock)


def test_plain_v1_then_requests_are_served(sasl_broker: RunningBroker) -> None:
    wire = Wire("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT"))
    wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
    done = wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), SaslAuthenticateResponse, 1)
    assert done.error_code == 0 and done.session_lifetime_ms == 0
    metadata = wire.call(MetadataRequest(topics=None), MetadataResponse, 1)
    assert "secure" in {t.name for t in metadata.topics}
    again = wire.call(SaslAuthenticateRequest(auth_bytes=b"x"), SaslAuthenticateResponse, 1)
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE  # not in a re-authentication
    wire.close()


def test_handshake_v0_carries_raw_tokens(sasl_broker: RunningBroker) -> None:
    wire = Wire("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT"))
    assert wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 0).error_code == 0
    token = b"\x00alice\x00alice-secret"
    wire.sock.sendall(struct.pack(">i", len(token)) + token)
    assert wire.sock.recv(4) == b"\x00\x00\x00\x00"  # PLAIN's empty answer, as a raw frame
    metadata = wire.call(MetadataRequest(topics=None), MetadataResponse, 1)
    assert "secure" in {t.name for t in metadata.topics}
    wire.close()
    wire = Wire("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT"))
    wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 0)
    bad = b"\x00alice\x00nope"
    wire.sock.sendall(struct.pack(">i", len(bad)) + bad)
    assert _closed(wire.sock)


def test_pre_authentication_frames_are_bounded() -> None:
    with broker({**SASL_OVERRIDES, "sasl.server.max.receive.size": "1024"}) as b:
        with socket.create_connection(("127.0.0.1", _port(b, "SASL_PLAINTEXT"))) as sock:
            sock.sendall(struct.pack(">i", 4096) + b"\x00" * 4096)
            assert _closed(sock)
        # After authentication the usual socket.request.max.bytes applies.
        wire = Wire("127.0.0.1", _port(b, "SASL_PLAINTEXT"))
        wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), SaslAuthenticateResponse, 1)
        long_name = "t" * 1500
        answer = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=long_name)],
                                           allow_auto_topic_creation=False), MetadataResponse, 4)
        assert answer.topics[0].name == long_name
        wire.close()


def test_session_lifetime_from_connections_max_reauth_ms() -> None:
    with broker({**SASL_OVERRIDES, "connections.max.reauth.ms": "1500"}) as b:
        wire = Wire("127.0.0.1", _port(b, "SASL_PLAINTEXT"))
        wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        done = wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"),
                         SaslAuthenticateResponse, 1)
        assert done.session_lifetime_ms == 1500
        wire.call(MetadataRequest(topics=None), MetadataResponse, 1)
        time.sleep(1.7)
        wire.send(MetadataRequest(topics=None), 1)  # expired and not re-authenticated: closed
        assert _closed(wire.sock)


# --- ACLs end to end ----------------------------------------------------------------------------
ACL_OVERRIDES = {**SASL_OVERRIDES, "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                 "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:admin"}


def _wait(futures: dict[Any, Any]) -> list[Any]:
    return [f.result(10) for f in futures.values()]


def test_acls_end_to_end() -> None:
    with broker(ACL_OVERRIDES, topics={"orders": 1, "hidden": 1}) as b:
        admin = AdminClient(_sasl_conf(b, "PLAIN", "admin", "admin-secret"))
        alice_admin = AdminClient(_sasl_conf(b, "PLAIN", "alice", "alice-secret"))
        # alice may not touch ACLs (ALTER on the cluster), nor see topics she has no rights on.
        with pytest.raises(KafkaException) as refused:
            _wait(alice_admin.create_acls([AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                                                      "User:alice", "*", AclOperation.WRITE,
                                                      AclPermissionType.ALLOW)]))
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert set(alice_admin.list_topics(timeout=10).topics) == set()
        # Without WRITE, alice's produce fails with TOPIC_AUTHORIZATION_FAILED.
        reports: list[Any] = []
        producer = Producer(_sasl_conf(b, "PLAIN", "alice", "alice-secret"))
        producer.produce("orders", b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
        assert reports and reports[0] is not None and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # The super user grants WRITE on a prefix; alice now writes, and sees exactly that topic.
        _wait(admin.create_acls([AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:alice",
                                            "*", AclOperation.WRITE, AclPermissionType.ALLOW)]))
        reports.clear()
        producer = Producer(_sasl_conf(b, "PLAIN", "alice", "alice-secret"))
        producer.produce("orders", b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
        assert reports == [None]
        assert set(alice_admin.list_topics(timeout=10).topics) == {"orders"}
        described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                                         None, AclOperation.ANY, AclPermissionType.ANY)).result(10)
        assert [(a.name, a.resource_pattern_type, a.principal, a.operation) for a in described] == [
            ("ord", ResourcePatternType.PREFIXED, "User:alice", AclOperation.WRITE)]
        # A DENY wins over the ALLOW; deleting it restores the right.
        deny = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                          AclOperation.ALL, AclPermissionType.DENY)
        _wait(admin.create_acls([deny]))
        reports.clear()
        producer.produce("orders", b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
        assert reports and reports[0] is not None and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        deleted = _wait(admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH,
                                                            None, None, AclOperation.ANY, AclPermissionType.DENY)]))
        assert [(a.name, a.permission_type) for a in deleted[0]] == [("orders", AclPermissionType.DENY)]
        # Groups need their own ACLs: without them, FindCoordinator and OffsetFetch are refused.
        wire = Wire("127.0.0.1", _port(b, "SASL_PLAINTEXT"))
        wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), SaslAuthenticateResponse, 1)
        found = wire.call(FindCoordinatorRequest(key="alice-group", key_type=0), FindCoordinatorResponse, 3)
        assert found.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        fetched = wire.call(OffsetFetchRequest(group_id="alice-group", topics=None), OffsetFetchResponse, 7)
        assert fetched.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        _wait(admin.create_acls([AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED,
                                            "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)]))
        found = wire.call(FindCoordinatorRequest(key="alice-group", key_type=0), FindCoordinatorResponse, 3)
        assert found.error_code == 0  # READ implies DESCRIBE
        wire.close()


def test_kafka4_admin_apis_authorized() -> None:
    """DescribeTopicPartitions shows alice only what she may describe (asked by name: refused);
    ListConfigResources needs DESCRIBE_CONFIGS on the cluster."""
    with broker(ACL_OVERRIDES, topics={"orders": 2, "hidden": 1}) as b:
        admin = AdminClient(_sasl_conf(b, "PLAIN", "admin", "admin-secret"))
        _wait(admin.create_acls([AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice",
                                            "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)]))
        wire = Wire("127.0.0.1", _port(b, "SASL_PLAINTEXT"))
        wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        wire.call(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), SaslAuthenticateResponse, 1)
        DTP = DescribeTopicPartitionsRequest
        everything = wire.call(DTP(topics=[]), DescribeTopicPartitionsResponse, 0)
        assert [(t.name, len(t.partitions)) for t in everything.topics] == [("orders", 2)]
        assert everything.topics[0].topic_authorized_operations == 1 << AclOperation.DESCRIBE.value
        named = wire.call(DTP(topics=[DTP.TopicRequest(name="hidden"), DTP.TopicRequest(name="orders")]),
                          DescribeTopicPartitionsResponse, 0)
        assert [(t.name, t.error_code) for t in named.topics] == [
            ("hidden", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("orders", 0)]
        listed = wire.call(ListConfigResourcesRequest(resource_types=[]), ListConfigResourcesResponse, 1)
        assert (listed.error_code, listed.config_resources) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        _wait(admin.create_acls([AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                            "User:alice", "*", AclOperation.DESCRIBE_CONFIGS,
                                            AclPermissionType.ALLOW)]))
        listed = wire.call(ListConfigResourcesRequest(resource_types=[2]), ListConfigResourcesResponse, 1)
        assert listed.error_code == 0 and {r.resource_name for r in listed.config_resources} >= {"orders", "hidden"}
        wire.close()
