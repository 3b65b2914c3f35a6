"""Delegation tokens under ZooKeeper, where Kafka 3.9 keeps them: /delegation_token/tokens/<tokenId>
(DelegationTokenManagerZk's JSON) and a /delegation_token/token_changes/token_change_<n> notification
per change, which every other broker follows. Two brokers' metadata caches on one real ZooKeeper; a
token written the way a Kafka 3.9 broker writes it reaches a grete broker's SCRAM credentials; and a
real Kafka 3.9.2 broker on the same ZooKeeper shares tokens with grete both ways."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from grete.broker.cluster.metadata_cache import ZkMetadataCache
from grete.broker.config import BrokerConfig
from grete.broker.security.delegation_tokens import DelegationTokenManager
from grete.coordinator.metadata import DelegationTokenInfo
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import ZkClient
from grete.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import ZooKeeperProcess
from tests.cluster.conftest import need_zookeeper
from tests.security.scram_client import scram_login
from tools import kafka_dist
from tools.reference_kafka import free_port
from tools.reference_kafka_zk import VERSION, KafkaZkCluster

pytestmark = pytest.mark.slow

SECRET = "zk-token-secret"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    need_zookeeper()
    process = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def _until(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        assert loop.time() < deadline, f"waited {seconds}s for {what}"
        await asyncio.sleep(0.05)


async def _cache(connect: str, broker_id: int) -> ZkMetadataCache:
    client = ZkClient(connect, session_timeout_ms=10_000, connection_timeout_ms=10_000)
    await client.start()
    for path in zk.PERSISTENT_PATHS:
        await client.ensure_path(path)
    cache = ZkMetadataCache(client, "cluster", broker_id, tokens=True)
    await cache.start()
    return cache


def test_tokens_in_kafka_39_znodes(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    async def run() -> None:
        one, two = await _cache(zookeeper.connect, 1), await _cache(zookeeper.connect, 2)
        config = BrokerConfig({"delegation.token.secret.key": SECRET, "log.dirs": str(tmp_path)})
        manager = DelegationTokenManager(config, two)
        token = DelegationTokenInfo("tok-grete", "User:alice", "User:alice", ("User:bob",), 1_000, 3_000, 2_000)
        await one.set_delegation_token(token)
        await _until(lambda: two.delegation_tokens().get("tok-grete") == token, "broker 2 to follow")
        found = manager.scram_credential("tok-grete", "SCRAM-SHA-512")
        assert found is not None and found.owner_name == "alice" and found.expiry_ms == 2_000
        assert manager.token_for_hmac(hmac.new(SECRET.encode(), b"tok-grete", hashlib.sha512).digest()) == token
        await one.remove_delegation_token("tok-grete")
        await _until(lambda: "tok-grete" not in two.delegation_tokens(), "broker 2 to drop it")
        assert manager.scram_credential("tok-grete", "SCRAM-SHA-512") is None
        for cache in (one, two):
            await cache.zk.close()

    asyncio.run(run())
    kazoo = KazooClient(hosts=zookeeper.connect)
    kazoo.start(10)
    try:
        assert kazoo.exists(zk.delegation_token_path("tok-grete")) is None
        changes = sorted(kazoo.get_children(zk.DELEGATION_TOKEN_CHANGES))
        assert [c.rsplit("_", 1)[0] + "_" for c in changes] == ["token_change_"] * 2
        assert [kazoo.get(f"{zk.DELEGATION_TOKEN_CHANGES}/{c}")[0] for c in changes] == [b"tok-grete"] * 2
    finally:
        kazoo.stop()
        kazoo.close()


def test_a_token_written_as_kafka_39_writes_it(zookeeper: ZooKeeperProcess) -> None:
    """setOrCreateDelegationToken's JSON and createTokenChangeNotification, as a Kafka 3.9 broker
    does them (here through kazoo); grete's broker reads the token and derives its SCRAM login."""
    kafka_json = {"version": 3, "owner": "User%3Acarol", "tokenRequester": "User%3Aadmin",
                  "renewers": ["User%3Abob"], "issueTimestamp": 1_700_000_000_000,
                  "maxTimestamp": 1_700_604_800_000, "expiryTimestamp": 1_700_086_400_000,
                  "tokenId": "Kp7uS_0mTBqbLfXv3yXr2A"}

    async def run() -> None:
        cache = await _cache(zookeeper.connect, 3)
        manager = DelegationTokenManager(BrokerConfig({"delegation.token.secret.key": SECRET}), cache)
        kazoo = KazooClient(hosts=zookeeper.connect)
        kazoo.start(10)
        try:
            kazoo.create(zk.delegation_token_path("Kp7uS_0mTBqbLfXv3yXr2A"), json.dumps(kafka_json).encode(),
                         makepath=True)
            kazoo.create(f"{zk.DELEGATION_TOKEN_CHANGES}/token_change_", b"Kp7uS_0mTBqbLfXv3yXr2A", sequence=True)
        finally:
            kazoo.stop()
            kazoo.close()
        await _until(lambda: "Kp7uS_0mTBqbLfXv3yXr2A" in cache.delegation_tokens(), "the notification")
        token = cache.delegation_tokens()["Kp7uS_0mTBqbLfXv3yXr2A"]
        assert (token.owner, token.requester, token.renewers) == ("User:carol", "User:admin", ("User:bob",))
        found = manager.scram_credential(token.token_id, "SCRAM-SHA-256")
        assert found is not None and found.owner_name == "carol"
        # The credential is the one a client derives from the base64 HMAC (the token's password).
        password = base64.b64encode(hmac.new(SECRET.encode(), token.token_id.encode(), hashlib.sha512).digest())
        salted = hashlib.pbkdf2_hmac("sha256", password, found.credential.salt, found.credential.iterations)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        assert hashlib.sha256(client_key).digest() == found.credential.stored_key
        await cache.zk.close()

    asyncio.run(run())


def _retry(call: Callable[[], Any], ok: Callable[[Any], bool], what: str, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        answer = call()
        if ok(answer):
            return answer
        assert time.monotonic() < deadline, f"waited {seconds}s for {what}: {answer}"
        time.sleep(0.2)


def test_tokens_shared_with_a_kafka_39_broker(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    """A real Kafka 3.9.2 broker in ZooKeeper mode on the same ZooKeeper, with the same secret key: a
    token it creates is read by grete's cache as Kafka wrote it, and a token grete writes logs in to
    Kafka with SCRAM tokenauth and is described by it."""

    plain, sasl = free_port(), free_port()
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
        "delegation.token.secret.key": SECRET,
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }
    if not kafka_dist.is_fetched(VERSION):
        pytest.skip(f"Kafka {VERSION}'s jars are not fetched (./scripts/install-test-deps)")
    broker = KafkaZkCluster(tmp_path, zookeeper, overrides, ports={7: plain}).start_broker(7)
    try:
        admin = Wire("127.0.0.1", plain, timeout=30.0)
        salt = b"0123456789abcdef"
        upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=salt,
            salted_password=hashlib.pbkdf2_hmac("sha256", b"alice-secret", salt, 4096))
        done = admin.call(AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsert]),
                          AlterUserScramCredentialsResponse, 0)
        assert done.results[0].error_code == 0, done
        admin.close()

        def alice() -> Wire:
            wire = Wire("127.0.0.1", sasl, timeout=30.0)
            if scram_login(wire, "SCRAM-SHA-256", "alice", "alice-secret").error_code == 0:
                return wire
            wire.close()
            raise AssertionError("alice cannot log in yet")

        wire = _retry(lambda: _try(alice), lambda w: w is not None, "alice's credential on Kafka")
        made = wire.call(CreateDelegationTokenRequest(renewers=[CreateDelegationTokenRequest.CreatableRenewers(
            principal_type="User", principal_name="bob")], max_lifetime_ms=-1), CreateDelegationTokenResponse, 3)
        assert made.error_code == 0, made

        async def grete_side() -> DelegationTokenInfo:
            cache = await _cache(zookeeper.connect, 8)
            try:
                kafka_made = cache.delegation_tokens()[made.token_id]
                ours = DelegationTokenInfo("grete-made-token", "User:alice", "User:alice", (),
                                           int(time.time() * 1000), int(time.time() * 1000) + 600_000,
                                           int(time.time() * 1000) + 300_000)
                await cache.set_delegation_token(ours)
            finally:
                await cache.zk.close()
            assert kafka_made == DelegationTokenInfo(made.token_id, "User:alice", "User:alice", ("User:bob",),
                                                     made.issue_timestamp_ms, made.max_timestamp_ms,
                                                     made.expiry_timestamp_ms)
            return ours

        ours = asyncio.run(grete_side())
        listed = _retry(lambda: wire.call(DescribeDelegationTokenRequest(owners=None), DescribeDelegationTokenResponse, 3),
                        lambda a: ours.token_id in [t.token_id for t in a.tokens], "Kafka to load grete's token")
        described = next(t for t in listed.tokens if t.token_id == ours.token_id)
        ours_hmac = hmac.new(SECRET.encode(), ours.token_id.encode(), hashlib.sha512).digest()
        assert (described.issue_timestamp, described.expiry_timestamp, described.max_timestamp,
                bytes(described.hmac)) == (ours.issue_ms, ours.expiry_ms, ours.max_ms, ours_hmac)
        wire.close()
        token_login = Wire("127.0.0.1", sasl, timeout=30.0)
        assert scram_login(token_login, "SCRAM-SHA-512", ours.token_id, base64.b64encode(ours_hmac).decode(),
                           tokenauth=True).error_code == 0
        token_login.close()
    finally:
        broker.stop(30)


def _try(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except AssertionError:
        return None
