"""The admin requests a grete KRaft controller carries out, on a real cluster: one grete controller,
two grete brokers and one Apache Kafka 4.3.1 broker. A grete broker sends its metadata changes to the
controller as requests (IncrementalAlterConfigs, CreateAcls, DeleteAcls, AlterClientQuotas,
AlterUserScramCredentials, ElectLeaders) and forwards its clients' delegation token requests in an
Envelope; the Kafka broker forwards its clients' in an Envelope; kafka-acls reaches the controller
directly with --bootstrap-controller. Each change is asked of one named broker (a request on a
connection to it, not an admin client's choice of broker) and read back through another.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.broker.config import ConfigSource
from grete.coordinator.kraft.store import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    IncrementalAlterConfigsRequest,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    UnregisterBrokerRequest,
)
from grete.testing._wire import Wire
from grete.testing.common import free_port
from tools import kafka_admin, kafka_dist
from tools.kraft_quorum import (
    KAFKA,
    BrokerOfQuorum,
    GreteBroker,
    KafkaBroker,
    Quorum,
    start_grete_broker,
    start_kafka_broker,
    start_quorum,
    wait_for,
)

pytestmark = pytest.mark.slow

# Every node runs an authorizer (a controller takes CreateAcls only with one); with no ACL on the
# cluster itself, every request stays allowed.
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}
# Delegation tokens on, with one secret key on every node (the controller derives the HMACs); a
# broker takes token requests on its SASL_PLAINTEXT listener only (PLAIN: alice).
TOKEN_SECRET = "token-secret"
TOKENS = {**AUTHORIZER, "delegation.token.secret.key": TOKEN_SECRET}
ALICE = ("alice", "alice-secret")
# The controller fences a killed grete broker at once (its port refuses); no session expires meanwhile.
CONTROLLER = {**TOKENS, "broker.session.timeout.ms": "30000"}
GRETE_IDS, KAFKA_ID = (10, 11), 12
TOPIC_ACL, LITERAL, READ, ALLOW, SCRAM_SHA_256 = 2, 3, 3, 3, 1  # Kafka's codes
ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")


@dataclass
class Cluster:
    quorum: Quorum
    grete: list[GreteBroker]
    kafka: KafkaBroker
    sasl_ports: dict[int, int]  # broker id -> its SASL_PLAINTEXT port

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.quorum.voters[1].port}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("controller-admin")
    quorum = start_quorum(["grete"], workdir / "quorum", lambda _kind: CONTROLLER)
    started: list[Any] = [quorum]
    try:
        quorum.leader_view()
        ports = {i: (free_port(), free_port()) for i in (*GRETE_IDS, KAFKA_ID)}
        grete = []
        for i in GRETE_IDS:
            grete.append(start_grete_broker(quorum, i, workdir / f"broker{i}", _listeners(*ports[i])))
            grete[-1].port = ports[i][0]
        started += grete
        kafka = start_kafka_broker(quorum, KAFKA_ID, workdir / f"broker{KAFKA_ID}", _listeners(*ports[KAFKA_ID]),
                                   start=False)
        kafka.port = ports[KAFKA_ID][0]
        kafka.start()
        started.append(kafka)
        for broker in [*grete, kafka]:
            wait_for(lambda b=broker: _listed(b) == {*GRETE_IDS, KAFKA_ID}, 120, f"broker {broker.node_id} listing all")
        yield Cluster(quorum, grete, kafka, {i: sasl for i, (_plain, sasl) in ports.items()})
    finally:
        for thing in reversed(started):
            thing.stop() if isinstance(thing, Quorum) else thing.kill()


def _listeners(plain: int, sasl: int) -> dict[str, str]:
    """A broker's properties: PLAINTEXT (the tests' admin requests) and SASL_PLAINTEXT (token requests)."""
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    return {**TOKENS, "listeners": listeners, "advertised.listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{ALICE[0]}="{ALICE[1]}";'}


def _login(sasl_port: int) -> Wire:
    """A connection to a broker's SASL_PLAINTEXT listener as alice (SASL/PLAIN)."""
    wire = Wire("127.0.0.1", sasl_port, timeout=30)
    assert wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1).error_code == 0
    done = wire.call(SaslAuthenticateRequest(auth_bytes=f"\0{ALICE[0]}\0{ALICE[1]}".encode()),
                     SaslAuthenticateResponse, 1)
    assert done.error_code == 0, done
    return wire


def _listed(broker: BrokerOfQuorum) -> set[int] | None:
    try:
        return set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001 - not up yet
        return None


def _create(broker: BrokerOfQuorum, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer
    admin.create_topics([topic])[topic.topic].result(30)


def _ask(broker: BrokerOfQuorum | str, request: Any, version: int) -> Any:
    """``request`` on a connection to this broker (or address) alone."""
    return kafka_admin.call(broker if isinstance(broker, str) else broker.bootstrap, request, version, timeout=30)


def _until(probe: Callable[[], Any], what: str, timeout: float = 30) -> None:
    wait_for(lambda: probe() or None, timeout, what)


def _set(broker: BrokerOfQuorum, kind: int, name: str, key: str, value: str) -> None:
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=kind, resource_name=name,
        configs=[IncrementalAlterConfigsRequest.AlterableConfig(name=key, config_operation=0, value=value)])])
    answer = _ask(broker, request, 1).responses[0]
    assert answer.error_code == ErrorCode.NONE, answer


def _config(broker: BrokerOfQuorum, kind: int, name: str, key: str) -> str | None:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=kind, resource_name=name, configuration_keys=[key])])
    return next((c.value for c in _ask(broker, request, 4).results[0].configs if c.name == key), None)


def _acl(resource: str, principal: str) -> tuple[Any, ...]:
    return (TOPIC_ACL, resource, LITERAL, principal, "*", READ, ALLOW)


def _create_acl(broker: BrokerOfQuorum, acl: tuple[Any, ...]) -> None:
    fields = dict(zip(ACL_FIELDS, acl, strict=True))
    fields["resource_pattern_type"] = fields.pop("pattern_type")
    answer = _ask(broker, CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(**fields)]), 3).results[0]
    assert answer.error_code == ErrorCode.NONE, answer


def _acls(broker: BrokerOfQuorum, resource: str) -> list[tuple[Any, ...]]:
    request = DescribeAclsRequest(resource_type_filter=TOPIC_ACL, resource_name_filter=resource,
                                  pattern_type_filter=LITERAL, principal_filter=None, host_filter=None,
                                  operation=1, permission_type=1)  # ANY, ANY
    answer = _ask(broker, request, 3)
    assert answer.error_code == ErrorCode.NONE, answer
    return [(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for r in answer.resources for a in r.acls]


def _quota(broker: BrokerOfQuorum, user: str) -> dict[str, float] | None:
    return kafka_admin.describe_client_quotas(broker.bootstrap).get((("user", user),))


def test_a_topic_config_set_through_one_broker_is_read_from_another(cluster: Cluster) -> None:
    first, second = cluster.grete
    _create(first, NewTopic("configured", 2, 2))
    _set(first, TOPIC_RESOURCE, "configured", "retention.ms", "12345")
    assert _config(first, TOPIC_RESOURCE, "configured", "retention.ms") == "12345"
    _until(lambda: _config(second, TOPIC_RESOURCE, "configured", "retention.ms") == "12345",
           "the topic config on the other broker")


def test_a_broker_and_a_group_config_set_and_read_back(cluster: Cluster) -> None:
    first, second = cluster.grete
    _set(first, BROKER_RESOURCE, str(first.node_id), "log.cleaner.threads", "2")
    assert _config(first, BROKER_RESOURCE, str(first.node_id), "log.cleaner.threads") == "2"
    _set(first, GROUP_RESOURCE, "shares", "share.auto.offset.reset", "earliest")
    _until(lambda: _config(second, GROUP_RESOURCE, "shares", "share.auto.offset.reset") == "earliest",
           "the group config on the other broker")


def test_the_cluster_starts_with_its_min_isr_as_a_cluster_default(cluster: Cluster) -> None:
    """Eligible leader replicas are on from the format step: the first active controller writes
    min.insync.replicas as a cluster-level config (Kafka's ELR safety record), which every broker,
    grete's and Kafka's, lists as a dynamic default."""
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name="", configuration_keys=["min.insync.replicas"])])
    for broker in (*cluster.grete, cluster.kafka):
        configs = _ask(broker, request, 4).results[0].configs
        assert [(c.name, c.value, c.config_source) for c in configs] == [
            ("min.insync.replicas", "1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)], broker


def test_an_acl_created_and_deleted(cluster: Cluster) -> None:
    first, second = cluster.grete
    acl = _acl("guarded", "User:alice")
    _create_acl(first, acl)
    _until(lambda: _acls(second, "guarded") == [acl], "the ACL on the other broker")
    fields = dict(zip(ACL_FIELDS, acl, strict=True))
    deleted = _ask(first, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(**{
        f"{k}_filter" if k not in ("operation", "permission_type") else k: v for k, v in fields.items()})]), 3)
    assert [(r.error_code, len(r.matching_acls)) for r in deleted.filter_results] == [(ErrorCode.NONE, 1)]
    _until(lambda: _acls(second, "guarded") == [], "the ACL gone from the other broker")


def test_a_client_quota_set_through_one_broker_is_read_from_another(cluster: Cluster) -> None:
    first, second = cluster.grete
    kafka_admin.alter_client_quotas(first.bootstrap, {"user": "quota-user"}, {"producer_byte_rate": 1024.0})
    _until(lambda: _quota(second, "quota-user") == {"producer_byte_rate": 1024.0}, "the quota on the other broker")


def test_a_kafka_broker_forwards_configs_acls_and_quotas_in_an_envelope(cluster: Cluster) -> None:
    """Asked of the Kafka broker, each change is forwarded to the grete controller; a grete broker shows it."""
    grete, kafka = cluster.grete[0], cluster.kafka
    _create(grete, NewTopic("forwarded", 1, 1))
    _set(kafka, TOPIC_RESOURCE, "forwarded", "retention.ms", "54321")
    _until(lambda: _config(grete, TOPIC_RESOURCE, "forwarded", "retention.ms") == "54321",
           "the config forwarded by the Kafka broker")
    acl = _acl("forwarded", "User:bob")
    _create_acl(kafka, acl)
    _until(lambda: _acls(grete, "forwarded") == [acl], "the ACL forwarded by the Kafka broker")
    kafka_admin.alter_client_quotas(kafka.bootstrap, {"user": "forwarded-user"}, {"consumer_byte_rate": 2048.0})
    _until(lambda: _quota(grete, "forwarded-user") == {"consumer_byte_rate": 2048.0},
           "the quota forwarded by the Kafka broker")


def test_a_scram_credential_forwarded_by_kafka_and_deleted_through_grete(cluster: Cluster) -> None:
    """The upsertion carries the salted password: the Kafka broker forwards it as it came, the grete
    controller derives the keys; a grete broker sends the deletion."""
    grete, kafka = cluster.grete[0], cluster.kafka
    Request = AlterUserScramCredentialsRequest
    upsert = Request(upsertions=[Request.ScramCredentialUpsertion(
        name="scram-user", mechanism=SCRAM_SHA_256, iterations=4096, salt=b"salt", salted_password=b"\x01" * 32)])
    assert [r.error_code for r in _ask(kafka, upsert, 0).results] == [ErrorCode.NONE]
    _until(lambda: _scram_iterations(grete, "scram-user") == [4096], "the credential on the grete broker")
    delete = Request(deletions=[Request.ScramCredentialDeletion(name="scram-user", mechanism=SCRAM_SHA_256)])
    assert [r.error_code for r in _ask(grete, delete, 0).results] == [ErrorCode.NONE]
    assert _scram_iterations(grete, "scram-user") == []


def test_a_scram_credential_upserted_through_grete_and_deleted_through_kafka(cluster: Cluster) -> None:
    """A grete broker sends the upsertion as it came (the salted password) and answers once its own
    image shows the credential; the other brokers see it, and the Kafka broker's deletion reaches all."""
    first, second = cluster.grete
    _upsert(first, "upserted")
    for broker in (second, cluster.kafka):
        _until(lambda b=broker: _scram_iterations(b, "upserted") == [8192], f"the credential on broker {broker.node_id}")
    Request = AlterUserScramCredentialsRequest
    delete = Request(deletions=[Request.ScramCredentialDeletion(name="upserted", mechanism=SCRAM_SHA_256)])
    assert [r.error_code for r in _ask(cluster.kafka, delete, 0).results] == [ErrorCode.NONE]
    _until(lambda: _scram_iterations(first, "upserted") == [], "the credential gone from the grete broker")


def _upsert(broker: BrokerOfQuorum, user: str) -> None:
    """A SCRAM-SHA-256 credential of 8192 iterations, which the broker's own image shows once answered."""
    Request = AlterUserScramCredentialsRequest
    upsert = Request(upsertions=[Request.ScramCredentialUpsertion(
        name=user, mechanism=SCRAM_SHA_256, iterations=8192, salt=b"salt", salted_password=b"\x02" * 32)])
    assert [(r.error_code, r.error_message) for r in _ask(broker, upsert, 0).results] == [(ErrorCode.NONE, None)]
    assert _scram_iterations(broker, user) == [8192]


def _scram_iterations(broker: BrokerOfQuorum, user: str) -> list[int]:
    described = _ask(broker, DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequest.UserName(name=user)]), 0).results[0]
    return [i.iterations for i in described.credential_infos]


def test_delegation_tokens_are_forwarded_to_the_controller(cluster: Cluster) -> None:
    """Create, renew and expire through any broker go to the controller in an Envelope with the
    caller's principal (the token's owner); the answers come back as the controller gave them, and a
    token created through one broker is renewed and expired through the others."""
    first, second = cluster.grete
    _token_round(cluster.sasl_ports, first, second, cluster.kafka)
    _token_round(cluster.sasl_ports, cluster.kafka, first, second)


def _token_round(sasl_ports: dict[int, int], creator: BrokerOfQuorum, renewer: BrokerOfQuorum,
                 expirer: BrokerOfQuorum, kafka_controller: bool = False) -> None:
    """A token created, renewed and expired, each through the broker named (logged in as alice)."""
    wires = {b.node_id: _login(sasl_ports[b.node_id]) for b in (creator, renewer, expirer)}
    try:
        create = CreateDelegationTokenRequest(owner_principal_type=None, owner_principal_name=None, renewers=[],
                                              max_lifetime_ms=-1)
        created = wires[creator.node_id].call(create, CreateDelegationTokenResponse, 3)
        assert (created.error_code, created.principal_type, created.principal_name) == (0, "User", ALICE[0])
        assert created.hmac == hmac.new(TOKEN_SECRET.encode(), created.token_id.encode(), hashlib.sha512).digest()
        renew = RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=60000)
        renewed = _renewed(wires[renewer.node_id], renew, ErrorCode.NONE, kafka_controller)
        assert renewed.error_code == ErrorCode.NONE
        assert created.issue_timestamp_ms < renewed.expiry_timestamp_ms <= created.max_timestamp_ms
        expire = ExpireDelegationTokenRequest(hmac=created.hmac, expiry_time_period_ms=-1)
        assert wires[expirer.node_id].call(expire, ExpireDelegationTokenResponse, 2).error_code == ErrorCode.NONE
        gone = _renewed(wires[creator.node_id], renew, ErrorCode.DELEGATION_TOKEN_NOT_FOUND, kafka_controller)
        assert gone.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    finally:
        for wire in wires.values():
            wire.close()


def _renewed(wire: Wire, renew: RenewDelegationTokenRequest, expected: int, kafka_controller: bool) -> Any:
    """The renewal's answer. Kafka's controller finds a token by its HMAC in a cache its metadata
    publisher fills after the commit, with nothing to wait on from outside: under it, the renewal is
    asked again (for up to 15 s, the cache lagging under load) until the answer is the one expected."""
    answer = wire.call(renew, RenewDelegationTokenResponse, 2)
    for _attempt in range(150 if kafka_controller else 0):
        if answer.error_code == expected:
            break
        time.sleep(0.1)
        answer = wire.call(renew, RenewDelegationTokenResponse, 2)
    return answer


@pytest.mark.long
def test_upserts_and_tokens_through_a_grete_broker_under_a_kafka_controller(tmp_path: Path) -> None:
    """The same requests, forwarded by a grete broker to an Apache Kafka 4.3.1 controller."""
    quorum = start_quorum(["kafka"], tmp_path / "quorum", lambda _kind: CONTROLLER)
    ports = (free_port(), free_port())
    broker: GreteBroker | None = None
    try:
        quorum.leader_view()
        broker = start_grete_broker(quorum, GRETE_IDS[0], tmp_path / "broker", _listeners(*ports))
        broker.port = ports[0]
        wait_for(lambda: _listed(broker) == {GRETE_IDS[0]}, 120, "the broker registered")
        _upsert(broker, "upserted")
        _token_round({broker.node_id: ports[1]}, broker, broker, broker, kafka_controller=True)
    finally:
        if broker is not None:
            broker.kill()
        quorum.stop()


def test_kafka_acls_adds_an_acl_through_the_controller_listener(cluster: Cluster) -> None:
    added = kafka_dist.run_tool(KAFKA, "kafka-acls", "--bootstrap-controller", cluster.controller, "--add",
                                "--allow-principal", "User:carol", "--operation", "Read", "--topic", "direct")
    assert added.returncode == 0, added.stderr
    _until(lambda: _acls(cluster.grete[1], "direct") == [_acl("direct", "User:carol")],
           "the ACL added at the controller")


def test_a_preferred_leader_is_elected_again(cluster: Cluster) -> None:
    """Broker 11, the preferred replica, dies: broker 10 leads. Once 11 is back in the ISR, a preferred
    election asked of broker 10 makes 11 the leader again."""
    first, second = cluster.grete
    _create(first, NewTopic("elected", 1, replica_assignment=[[second.node_id, first.node_id]]))
    _until(lambda: _partition(first).leader == second.node_id, "the preferred replica leading")
    second.kill()
    _until(lambda: _partition(first).leader == first.node_id, "the other replica leading")
    second.start()
    _until(lambda: len(_partition(first).isrs) == 2, "the restarted broker back in the ISR", 90)
    election = ElectLeadersRequest(election_type=0, timeout_ms=30000,
                                   topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="elected", partitions=[0])])
    answer = _ask(first, election, 2)
    assert answer.error_code == ErrorCode.NONE
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == [("elected", [(0, ErrorCode.NONE)])]
    _until(lambda: _partition(first).leader == second.node_id, "the preferred replica leading again")


def _partition(broker: BrokerOfQuorum) -> Any:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.list_topics("elected", timeout=5).topics["elected"].partitions[0]


def test_a_voter_that_does_not_lead_answers_not_controller(tmp_path: Path) -> None:
    """Each write asked of a follower voter answers NOT_CONTROLLER, so the caller asks the leader."""
    quorum = start_quorum(["grete", "grete", "grete"], tmp_path / "quorum", lambda _kind: CONTROLLER)
    try:
        view = quorum.caught_up(timeout=120)
        follower = next(v for v in quorum.voters.values() if v.node_id != view.leader_id)
        address = f"127.0.0.1:{follower.port}"
        configs = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=BROKER_RESOURCE, resource_name="", configs=[IncrementalAlterConfigsRequest.AlterableConfig(
                name="log.cleaner.threads", config_operation=0, value="2")])])
        assert _ask(address, configs, 1).responses[0].error_code == ErrorCode.NOT_CONTROLLER
        fields = dict(zip(ACL_FIELDS, _acl("t", "User:alice"), strict=True))
        fields["resource_pattern_type"] = fields.pop("pattern_type")
        acls = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(**fields)])
        assert _ask(address, acls, 3).results[0].error_code == ErrorCode.NOT_CONTROLLER
        quotas = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type="user", entity_name="alice")],
            ops=[AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=1024.0, remove=False)])])
        assert _ask(address, quotas, 1).entries[0].error_code == ErrorCode.NOT_CONTROLLER
        election = ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=30000)
        assert _ask(address, election, 2).error_code == ErrorCode.NOT_CONTROLLER
    finally:
        quorum.stop()



def test_kafka_configs_reads_through_the_controller_listener(cluster: Cluster) -> None:
    """kafka-configs --bootstrap-controller: DescribeConfigs (a broker default set through a broker),
    and DescribeUserScramCredentials, answered by the controller itself, as Kafka 4.3.1's does."""
    _set(cluster.grete[0], BROKER_RESOURCE, "", "log.cleaner.backoff.ms", "16000")
    described = kafka_dist.run_tool(KAFKA, "kafka-configs", "--bootstrap-controller", cluster.controller, "--describe",
                                    "--entity-type", "brokers", "--entity-default")
    assert described.returncode == 0, described.stderr
    assert "log.cleaner.backoff.ms=16000" in described.stdout, described.stdout
    # (kafka-configs --entity-type users also asks DescribeClientQuotas, which Kafka's admin client
    # itself refuses to send to a controller: the SCRAM read is asked on the wire.)
    users = _ask(cluster.controller, DescribeUserScramCredentialsRequest(users=None), 0)
    assert users.error_code == ErrorCode.NONE, users


def test_a_dead_broker_is_unregistered_with_kafka_cluster(cluster: Cluster) -> None:
    """kafka-cluster unregister through a broker (forwarded to the controller): the dead broker leaves
    every ISR and its registration goes; an unknown id is refused; started again, it registers anew."""
    first, second = cluster.grete
    _create(first, NewTopic("decommissioned", 1, replica_assignment=[[first.node_id, second.node_id]]))
    _until(lambda: len(_topic_partition(first, "decommissioned").isrs) == 2, "both replicas in sync")
    second.kill()
    done = kafka_dist.run_tool(KAFKA, "kafka-cluster", "unregister", "--bootstrap-server", first.bootstrap,
                               "--id", str(second.node_id))
    assert done.returncode == 0 and f"Broker {second.node_id} is no longer registered." in done.stdout, done.stderr
    _until(lambda: _topic_partition(first, "decommissioned").isrs == [first.node_id], "the ISR without it")
    for asked in (first, cluster.kafka, cluster.controller):  # forwarded by grete, in an Envelope by Kafka; direct
        unknown = _ask(asked, UnregisterBrokerRequest(broker_id=99), 0)
        assert (unknown.error_code, unknown.error_message) == (ErrorCode.BROKER_ID_NOT_REGISTERED,
                                                               "Broker ID 99 is not currently registered")
    second.start()
    _until(lambda: _listed(first) == {*GRETE_IDS, KAFKA_ID}, "the broker registered again", 90)
    _until(lambda: len(_topic_partition(first, "decommissioned").isrs) == 2, "back in the ISR", 90)


def _topic_partition(broker: BrokerOfQuorum, topic: str) -> Any:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
