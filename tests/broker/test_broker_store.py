"""A KRaft broker's metadata writes (grete/broker/quorum/broker_store.py): a Raft observer of a real
single-voter controller quorum, grete's or Apache Kafka 4.3.1's, builds the image; the store's
changes go to the controller as a Kafka broker's requests and are seen in the image when they return.
The broker registers and is unfenced first, as the controller places replicas only on such brokers."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from grete.broker.quorum.addresses import parse_voters
from grete.broker.quorum.broker_store import BrokerMetadataStore
from grete.broker.quorum.controller_channel import Address, ControllerChannel, QuorumLeader, not_controller
from grete.broker.quorum.driver import RaftDriver
from grete.broker.security.scram_upsertion import ScramUpsertion
from grete.coordinator.kraft.quorum import METADATA_PARTITION_DIR
from grete.coordinator.kraft.raft import RaftConfig
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.metadata import DelegationTokenInfo, NoSuchTopic, ScramCredential, TopicExists
from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    CreateTopicsResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from tools.kraft_quorum import Quorum, start_quorum

BROKER_ID = 100
R = TypeVar("R", bound=Message)
TIMEOUT_S = 30.0
# One heartbeat unfences the broker; no session expires during the test.
CONTROLLER_CONFIG = {"broker.session.timeout.ms": "600000"}
# A controller takes CreateAcls only with an authorizer; with no ACL on the cluster, the broker's
# requests stay allowed.
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}
# Delegation tokens on: the controller creates them and derives their HMACs with this key.
TOKEN_SECRET = "token-secret"
TOKENS = {"delegation.token.secret.key": TOKEN_SECRET}
ACL = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                 AclPermissionType.ALLOW)


@pytest.fixture(params=["grete", "kafka"])
def quorum(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quorum]:
    started = start_quorum([request.param], tmp_path / "quorum",
                           lambda _kind: {**CONTROLLER_CONFIG, **AUTHORIZER, **TOKENS})
    try:
        started.caught_up(timeout=120)
        yield started
    finally:
        started.stop()


class Broker:
    """The observer, its store and channel; registered and unfenced by ``join``."""

    def __init__(self, quorum: Quorum, directory: Path,
                 active: Callable[[QuorumLeader], Callable[[], Awaitable[Address]]] = lambda leader: leader) -> None:
        partition_dir = directory / METADATA_PARTITION_DIR
        partition_dir.mkdir(parents=True)
        self.epoch = -1
        self.driver = RaftDriver(BROKER_ID, parse_voters(quorum.voters_line.split(",")), partition_dir,
                                 quorum.cluster_id, RaftConfig(), self.committed)
        self.leader = QuorumLeader(self.driver)
        self.channel = ControllerChannel(BROKER_ID, active(self.leader), TIMEOUT_S)
        self.store = BrokerMetadataStore(quorum.cluster_id, self.channel, lambda: self.epoch)
        # The listener it registers: a grete controller watches a broker's port and fences one whose
        # port refuses connections (its process is gone), so this one must be open.
        self.listener: asyncio.Server | None = None

    def committed(self, batch: RaftBatch) -> None:
        self.store.apply_batch(batch)

    async def join(self) -> None:
        # Asked before the observer knows a leader: the driver's leader-change callback answers it.
        known = asyncio.ensure_future(self.leader())
        self.driver.start()
        host, port = await asyncio.wait_for(known, TIMEOUT_S)
        address = self.driver.address_of(self.driver.describe()[0])
        assert address is not None and address.port == port
        store = self.store
        await store.until(lambda: store.finalized_features()[1] is not None, "the bootstrap records")
        _epoch, levels = store.finalized_features()
        assert levels is not None
        self.listener = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        port = self.listener.sockets[0].getsockname()[1]
        registration = BrokerRegistrationRequest(
            broker_id=BROKER_ID, cluster_id=store.cluster_id, incarnation_id=uuid.uuid4(),
            listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=port,
                                                          security_protocol=0)],
            features=[BrokerRegistrationRequest.Feature(name=name, min_supported_version=0, max_supported_version=level)
                      for name, level in sorted(levels.items())],
            rack=None, log_dirs=[uuid.uuid4()])
        registered = await self.channel.call(registration, 4)
        assert isinstance(registered, BrokerRegistrationResponse) and registered.error_code == 0, registered
        self.epoch = registered.broker_epoch
        # Caught up once the image holds the broker's own registration; then it may be unfenced.
        await store.until(lambda: store.applied_offset >= self.epoch, "the registration")
        beat = await self.channel.call(BrokerHeartbeatRequest(broker_id=BROKER_ID, broker_epoch=self.epoch,
                                                              current_metadata_offset=store.applied_offset), 1)
        assert isinstance(beat, BrokerHeartbeatResponse) and beat.error_code == 0 and not beat.is_fenced, beat

    async def close(self) -> None:
        self.channel.close()
        await self.driver.close()
        if self.listener is not None:
            self.listener.close()


@pytest.mark.slow
def test_writes_go_to_the_controller_and_are_seen_in_the_image(quorum: Quorum, tmp_path: Path) -> None:
    async def run() -> None:
        broker = Broker(quorum, tmp_path / "broker")
        store = broker.store
        try:
            await broker.join()
            meta = await store.create_topic("t", {0: [BROKER_ID], 1: [BROKER_ID]}, {"retention.ms": "60000"})
            assert store.topic("t") is meta and store.topic_by_id(meta.topic_id) is meta
            assert {i: p.replicas for i, p in meta.partitions.items()} == {0: [BROKER_ID], 1: [BROKER_ID]}
            assert all(p.leader == BROKER_ID for p in meta.partitions.values())
            assert meta.configs == {"retention.ms": "60000"}
            with pytest.raises(TopicExists):
                await store.create_topic("t", {0: [BROKER_ID]}, {})

            assert await store.add_partitions("t", {2: [BROKER_ID]}) is meta
            assert sorted(meta.partitions) == [0, 1, 2] and meta.partitions[2].replicas == [BROKER_ID]

            first = await store.allocate_producer_ids(1000)
            assert await store.allocate_producer_ids(1000) == first + 1000
            assert store.next_producer_id == first + 2000

            await _configs_and_quotas(store)
            await _acls(store)
            await _scram(store)

            assert await store.delete_topic("t") is meta
            assert store.topic("t") is None and store.topic_by_id(meta.topic_id) is None
            with pytest.raises(NoSuchTopic):
                await store.delete_topic("t")
        finally:
            await broker.close()
    asyncio.run(run())


@pytest.mark.slow
def test_a_token_request_is_forwarded_in_an_envelope_as_the_caller_s(quorum: Quorum, tmp_path: Path) -> None:
    """The controller carries out the request as the Envelope's principal asked it (the token's owner),
    over the PLAINTEXT hop, and writes the DelegationTokenRecord the image then shows; a caller that
    logged in with a token is refused, as Kafka's ControllerApis refuses one."""
    async def run() -> None:
        broker = Broker(quorum, tmp_path / "broker")
        store = broker.store

        async def forward(request: Message, answer: type[R], version: int, token_authenticated: bool = False) -> R:
            return await store.forward(request, answer, version, "tokens", "User:alice", token_authenticated,
                                       "127.0.0.1")
        try:
            await broker.join()
            create = CreateDelegationTokenRequest(owner_principal_type=None, owner_principal_name=None, renewers=[],
                                                  max_lifetime_ms=-1)
            created = await forward(create, CreateDelegationTokenResponse, 3)
            assert (created.error_code, created.principal_type, created.principal_name) == (0, "User", "alice")
            assert created.hmac == hmac.new(TOKEN_SECRET.encode(), created.token_id.encode(), hashlib.sha512).digest()
            await store.until(lambda: created.token_id in store.delegation_tokens(), "the new token")
            token = store.delegation_tokens()[created.token_id]
            assert (token.owner, token.expiry_ms) == ("User:alice", created.expiry_timestamp_ms)
            refused = await forward(create, CreateDelegationTokenResponse, 3, token_authenticated=True)
            assert refused.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            expire = ExpireDelegationTokenRequest(hmac=created.hmac, expiry_time_period_ms=-1)
            # Kafka's controller finds a token by its HMAC in a cache its metadata publisher fills after
            # the commit, with nothing to wait on from here: right after the create, NOT_FOUND is asked again.
            for _attempt in range(50):
                expired = await forward(expire, ExpireDelegationTokenResponse, 2)
                if expired.error_code != ErrorCode.DELEGATION_TOKEN_NOT_FOUND:
                    break
                await asyncio.sleep(0.1)
            assert expired.error_code == ErrorCode.NONE
            await store.until(lambda: created.token_id not in store.delegation_tokens(), "the token removed")
        finally:
            await broker.close()
    asyncio.run(run())


async def _configs_and_quotas(store: BrokerMetadataStore) -> None:
    """IncrementalAlterConfigs (topic, cluster default, this broker, a group) and AlterClientQuotas."""
    entity = (("user", "alice"),)
    await store.set_topic_configs("t", {"cleanup.policy": "compact"})  # SET one key, DELETE the other
    topic = store.topic("t")
    assert topic is not None and topic.configs == {"cleanup.policy": "compact"}
    # Kafka's controller wrote a cluster-level min.insync.replicas at bootstrap (ELR), which it will not
    # see removed: the new set keeps it.
    cluster = {**store.broker_configs(""), "log.cleaner.threads": "2"}
    await store.set_broker_configs("", cluster)
    assert store.broker_configs("") == cluster
    # The broker's own configs: the controller takes any broker's id, not only its own.
    await store.set_broker_configs(str(BROKER_ID), {"log.cleaner.threads": "3"})
    assert store.broker_configs(str(BROKER_ID)) == {"log.cleaner.threads": "3"}
    await store.set_group_configs("g", {"share.auto.offset.reset": "earliest"})
    assert store.group_configs("g") == {"share.auto.offset.reset": "earliest"}
    await store.alter_client_quotas(entity, {"producer_byte_rate": 1024.0})
    assert store.client_quotas() == {entity: {"producer_byte_rate": 1024.0}}
    await store.alter_client_quotas(entity, {"producer_byte_rate": None})
    assert store.client_quotas() == {}
    with pytest.raises(NoSuchTopic):
        await store.set_topic_configs("missing", {"cleanup.policy": "compact"})


async def _acls(store: BrokerMetadataStore) -> None:
    await store.add_acls([ACL])
    assert store.acls() == {ACL}
    await store.remove_acls([ACL])
    assert store.acls() == frozenset()


async def _scram(store: BrokerMetadataStore) -> None:
    """An upsertion carries the salted password; the controller derives the same keys the broker did."""
    upsertion = ScramUpsertion.derive("SCRAM-SHA-512", b"salt", b"\x03" * 64, 4096)
    await store.set_scram_credential("carol", "SCRAM-SHA-512", upsertion)
    assert store.scram_credentials() == {"carol": {"SCRAM-SHA-512": upsertion.stored()}}
    await store.set_scram_credential("carol", "SCRAM-SHA-512", None)
    assert store.scram_credentials() == {}


class Misdirected:
    """The active controller as a stale view has it: a follower's address first, then the leader's."""

    def __init__(self, leader: QuorumLeader, follower: Address) -> None:
        self.leader = leader
        self.follower = follower
        self.asked = 0

    async def __call__(self) -> Address:
        self.asked += 1
        return self.follower if self.asked == 1 else await self.leader()


@pytest.mark.slow
def test_writes_follow_the_leadership_of_a_quorum_of_three(tmp_path: Path) -> None:
    """A voter that does not lead answers NOT_CONTROLLER: the channel asks for the leader again and
    sends there. Once the leader is killed, the next write waits for the observer to learn of the new
    leader and goes to it."""
    quorum = start_quorum(["grete", "grete", "grete"], tmp_path / "quorum", lambda _kind: CONTROLLER_CONFIG)
    try:
        view = quorum.caught_up(timeout=120)
        follower = next(v for v in quorum.voters.values() if v.node_id != view.leader_id)
        misdirected: list[Misdirected] = []

        def active(leader: QuorumLeader) -> Misdirected:
            misdirected.append(Misdirected(leader, ("127.0.0.1", follower.port)))
            return misdirected[0]

        async def run() -> None:
            broker = Broker(quorum, tmp_path / "broker", active)
            try:
                await broker.join()  # its registration first went to the follower
                assert misdirected[0].asked >= 2
                before = await broker.store.create_topic("before", {0: [BROKER_ID]}, {})
                leader, epoch, _high_watermark = broker.driver.describe()
                await asyncio.to_thread(quorum.voters[leader].kill)
                after = await broker.store.create_topic("after", {0: [BROKER_ID]}, {})
                assert broker.driver.describe()[:2] != (leader, epoch)
                assert {t.name for t in broker.store.topics().values()} == {"before", "after"}
                assert after.topic_id != before.topic_id
            finally:
                await broker.close()
        asyncio.run(run())
    finally:
        quorum.stop()


def test_not_controller_is_the_answer_s_own_error_or_every_item_s() -> None:
    result = CreateTopicsResponse.CreatableTopicResult
    moved, created = ErrorCode.NOT_CONTROLLER, ErrorCode.NONE
    assert not_controller(AllocateProducerIdsResponse(error_code=moved))
    assert not not_controller(AllocateProducerIdsResponse(error_code=created))
    assert not_controller(CreateTopicsResponse(topics=[result(name="a", error_code=moved),
                                                       result(name="b", error_code=moved)]))
    assert not not_controller(CreateTopicsResponse(topics=[result(name="a", error_code=moved),
                                                           result(name="b", error_code=created)]))
    assert not not_controller(CreateTopicsResponse(topics=[]))


def test_a_request_while_no_leader_is_known_times_out() -> None:
    async def run() -> None:
        never: asyncio.Future[Address] = asyncio.get_running_loop().create_future()

        async def no_leader() -> Address:
            return await never
        channel = ControllerChannel(BROKER_ID, no_leader, timeout_s=0.1)
        with pytest.raises(KafkaError) as timed_out:
            await channel.call(AllocateProducerIdsRequest(broker_id=BROKER_ID, broker_epoch=1), 0)
        assert timed_out.value.code == ErrorCode.REQUEST_TIMED_OUT
    asyncio.run(run())


def test_writes_no_controller_request_carries_are_refused_without_asking() -> None:
    async def unreachable() -> Address:
        raise AssertionError("no request should be sent")
    store = BrokerMetadataStore("cluster", ControllerChannel(BROKER_ID, unreachable, TIMEOUT_S), lambda: 1)
    credential = ScramCredential(b"salt", b"stored", b"server", 4096)
    token = DelegationTokenInfo("id", "User:alice", "User:alice", (), 0, 1, 1)

    async def run() -> None:
        refusals = ((store.set_scram_credential("alice", "SCRAM-SHA-256", credential), ErrorCode.UNSUPPORTED_VERSION),
                    (store.set_delegation_token(token), ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
                    (store.remove_delegation_token("id"), ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED))
        for write, code in refusals:
            with pytest.raises(KafkaError) as refused:
                await write
            assert refused.value.code == code
        # Nothing to delete, nothing sent: as in the local stores, a missing credential is no change.
        await store.set_scram_credential("alice", "SCRAM-SHA-256", None)
    asyncio.run(run())
