"""Delegation tokens under ZooKeeper, where Kafka 3.9 keeps them: /delegation_token/tokens/<tokenId>
(DelegationTokenManagerZk's JSON) and a /delegation_token/token_changes/token_change_<n> notification
per change, which every other broker follows. Two brokers' metadata caches on one real ZooKeeper; a
token written the way a Kafka 3.9 broker writes it reaches a grete broker's SCRAM credentials."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from grete.broker.cluster.metadata_cache import ZkMetadataCache
from grete.broker.config import BrokerConfig
from grete.broker.delegation_tokens import DelegationTokenManager
from grete.coordinator import zk_layout as zk
from grete.coordinator.metadata import DelegationTokenInfo
from grete.coordinator.zk_client import ZkClient
from grete.testing.cluster import ZooKeeperProcess
from tests.cluster.conftest import need_zookeeper

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
