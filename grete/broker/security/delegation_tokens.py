"""Delegation tokens (KIP-48): what Kafka's DelegationTokenManager and its controller's
DelegationTokenControlManager do, over the metadata store's tokens.

- The store owns the tokens (``DelegationTokenInfo``: owner, requester, renewers, times); this
  manager owns what is derived from them with the secret key: each token's HMAC-SHA512 of its id
  (the token's password, base64 on the client side), the index from HMAC to token, and the SCRAM
  credentials a ``tokenauth`` login is checked against (derived from the base64 HMAC with a random
  salt and 4096 iterations per mechanism, as Kafka's ScramFormatter.generateCredential).
- Create / renew / expire follow Kafka 4.3's controller (the profile grete answers with): the
  lifetime asked for is capped by ``delegation.token.max.lifetime.ms``; a renewal by
  ``delegation.token.expiry.time.ms``; a negative expiry period removes the token at once.
- Expired tokens are removed by a timer every ``delegation.token.expiry.check.interval.ms``, as
  Kafka's sweep; in a ZooKeeper cluster only the controller sweeps (Kafka 3.9's KafkaController),
  the other brokers follow its token_change notifications.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from grete.broker.config import BrokerConfig
from grete.coordinator.metadata import (
    ChangeKind,
    DelegationTokenInfo,
    MetadataChange,
    MetadataStore,
    ScramCredential,
    new_topic_id,
)
from grete.protocol.errors import ErrorCode
from grete.storage.files import uuid_to_kafka

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
TOKEN_SCRAM_ITERATIONS = 4096  # ScramMechanism.minIterations, what Kafka derives token credentials with
_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def _sum(now: int, duration: int) -> int:
    """Kafka's saturating ``now + duration``."""
    return LONG_MAX if now > LONG_MAX - duration else now + duration


def principal_name(principal: str) -> str:
    """``User:alice`` -> ``alice`` (KafkaPrincipal.getName)."""
    return principal.partition(":")[2]


def scram_credential_for(mechanism: str, password: str, salt: bytes | None = None,
                         iterations: int = TOKEN_SCRAM_ITERATIONS) -> ScramCredential:
    """RFC 5802's keys from a password: SaltedPassword = Hi(password, salt, i), then StoredKey and
    ServerKey (what AlterUserScramCredentials stores for users)."""
    digest = _DIGESTS[mechanism]
    salt = os.urandom(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(),
                           hmac.new(salted, b"Server Key", digest).digest(), iterations)


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """What a SCRAM ``tokenauth`` login needs: the credential, the owner's name (the session's
    principal becomes ``User:<name>``) and the token's expiry (the session's lifetime bound)."""

    credential: ScramCredential
    owner_name: str
    expiry_ms: int


@dataclass(frozen=True, slots=True)
class Created:
    error: int
    token: DelegationTokenInfo | None = None
    hmac: bytes = b""


def secret_key(config: BrokerConfig) -> str | None:
    """``delegation.token.secret.key``, else the deprecated ``delegation.token.master.key``; None when
    neither is set to a non-empty value (tokens are then disabled, as Kafka's tokenAuthEnabled)."""
    return config.raw("delegation.token.secret.key") or config.raw("delegation.token.master.key") or None


def tokens_enabled(config: BrokerConfig) -> bool:
    return secret_key(config) is not None


class DelegationTokenManager:
    def __init__(self, config: BrokerConfig, store: MetadataStore, *,
                 sweeps: Callable[[], bool] = lambda: True,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        secret = secret_key(config)
        if secret is not None and not config.raw("delegation.token.secret.key"):
            log.warning("delegation.token.master.key is deprecated: use delegation.token.secret.key")
        self._secret = secret.encode("utf-8") if secret is not None else None
        self.max_lifetime_ms = config.get_int("delegation.token.max.lifetime.ms")
        self.renew_ms = config.get_int("delegation.token.expiry.time.ms")
        self.check_interval_ms = config.get_int("delegation.token.expiry.check.interval.ms")
        self._store = store
        self._sweeps = sweeps
        self._now = clock_ms
        self._by_hmac: dict[bytes, str] = {}
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sweeping: asyncio.Task[list[str]] | None = None
        store.changes.subscribe(self._on_change)
        self._reindex()

    @property
    def enabled(self) -> bool:
        """Kafka's tokenAuthEnabled: a non-empty secret key."""
        return self._secret is not None

    def hmac_of(self, token_id: str) -> bytes:
        assert self._secret is not None
        return hmac.new(self._secret, token_id.encode("utf-8"), hashlib.sha512).digest()

    # --- the cache derived from the store ----------------------------------------------------------
    def _on_change(self, change: MetadataChange) -> None:
        if change.kind is ChangeKind.DELEGATION_TOKENS_CHANGED:
            self._reindex()

    def _reindex(self) -> None:
        tokens = self._store.delegation_tokens()
        self._by_hmac = {self.hmac_of(t): t for t in tokens} if self.enabled else {}
        # A renewal keeps the credentials (they depend on the HMAC only); removed tokens lose theirs.
        self._credentials = {key: c for key, c in self._credentials.items() if key[0] in tokens}

    def token_for_hmac(self, token_hmac: bytes) -> DelegationTokenInfo | None:
        token_id = self._by_hmac.get(bytes(token_hmac))
        return None if token_id is None else self._store.delegation_tokens().get(token_id)

    def scram_credential(self, token_id: str, mechanism: str) -> TokenCredential | None:
        """The credential a ``tokenauth=true`` SCRAM login with this token id is checked against;
        None for an unknown token (or with tokens disabled). As Kafka's cache, a token past its
        expiry still logs in until the sweep removes it, with a session that ends at once."""
        token = self._store.delegation_tokens().get(token_id) if self.enabled else None
        if token is None or mechanism not in _DIGESTS:
            return None
        credential = self._credentials.get((token_id, mechanism))
        if credential is None:
            password = base64.b64encode(self.hmac_of(token_id)).decode("ascii")
            credential = self._credentials[(token_id, mechanism)] = scram_credential_for(mechanism, password)
        return TokenCredential(credential, principal_name(token.owner), token.expiry_ms)

    def tokens(self) -> list[tuple[DelegationTokenInfo, bytes]]:
        """Every token with its HMAC (DescribeDelegationToken returns both)."""
        return [(t, self.hmac_of(t.token_id)) for t in self._store.delegation_tokens().values()]

    # --- the operations (DelegationTokenControlManager) --------------------------------------------
    async def create(self, owner: str, requester: str, renewers: list[str], max_lifetime_ms: int) -> Created:
        if not self.enabled:
            return Created(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        now = self._now()
        lifetime = min(self.max_lifetime_ms, max_lifetime_ms) if max_lifetime_ms > 0 else self.max_lifetime_ms
        max_ms = _sum(now, lifetime)
        token = DelegationTokenInfo(uuid_to_kafka(new_topic_id()), owner, requester, tuple(renewers), now,
                                    max_ms, min(max_ms, _sum(now, self.renew_ms)))
        await self._store.set_delegation_token(token)
        log.info("Created a delegation token: %s for owner: %s", token.token_id, owner)
        return Created(ErrorCode.NONE, token, self.hmac_of(token.token_id))

    async def renew(self, principal: str, token_hmac: bytes, period_ms: int) -> tuple[int, int]:
        """(error, new expiry timestamp); 0 as the timestamp on an error, as Kafka 4.3 answers."""
        if not self.enabled:
            return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, 0
        token = self.token_for_hmac(token_hmac)
        now = self._now()
        if token is None:
            return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, 0
        if token.expired(now):
            return ErrorCode.DELEGATION_TOKEN_EXPIRED, 0
        if principal != token.owner and principal not in token.renewers:
            return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, 0
        period = min(self.renew_ms, period_ms) if period_ms > 0 else self.renew_ms
        expiry = min(token.max_ms, now + period)
        await self._store.set_delegation_token(_with_expiry(token, expiry))
        return ErrorCode.NONE, expiry

    async def expire(self, principal: str, token_hmac: bytes, period_ms: int) -> tuple[int, int]:
        """(error, expiry timestamp); a negative period removes the token now."""
        if not self.enabled:
            return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, 0
        token = self.token_for_hmac(token_hmac)
        now = self._now()
        if token is None:
            return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, 0
        if principal != token.owner and principal not in token.renewers:
            return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, 0
        if period_ms < 0:
            await self._store.remove_delegation_token(token.token_id)
            log.info("Token expired for token: %s for owner: %s", token.token_id, token.owner)
            return ErrorCode.NONE, now
        if token.expired(now):
            return ErrorCode.DELEGATION_TOKEN_EXPIRED, 0
        expiry = min(token.max_ms, _sum(now, period_ms))
        await self._store.set_delegation_token(_with_expiry(token, expiry))
        return ErrorCode.NONE, expiry

    # --- the sweep -----------------------------------------------------------------------------
    def start(self) -> None:
        """Arm the sweep timer (only with tokens enabled, as Kafka schedules it)."""
        if self.enabled and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.check_interval_ms / 1000, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sweeping is not None:
            self._sweeping.cancel()

    def _tick(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.check_interval_ms / 1000, self._tick)
        if self._sweeps() and (self._sweeping is None or self._sweeping.done()):
            self._sweeping = asyncio.ensure_future(self.sweep())

    async def sweep(self) -> list[str]:
        """Remove every token past its expiry or max lifetime; the removed ids."""
        now = self._now()
        gone = [t for t in list(self._store.delegation_tokens().values()) if t.expired(now)]
        for token in gone:
            log.info("Delegation token expired for token: %s for owner: %s", token.token_id, token.owner)
            try:
                await self._store.remove_delegation_token(token.token_id)
            except Exception:  # a failed write leaves the token for the next sweep
                log.exception("could not remove expired delegation token %s", token.token_id)
        return [t.token_id for t in gone]


def _with_expiry(token: DelegationTokenInfo, expiry_ms: int) -> DelegationTokenInfo:
    return DelegationTokenInfo(token.token_id, token.owner, token.requester, token.renewers, token.issue_ms,
                               token.max_ms, expiry_ms)


ANONYMOUS = "User:ANONYMOUS"


def token_requests_allowed(security_protocol: str, principal: str, token_authenticated: bool,
                           forwarded: bool = False) -> bool:
    """Kafka's allowTokenRequests: not over PLAINTEXT, not over SSL without a client certificate,
    not on a connection that authenticated with a delegation token. A request a KRaft broker
    forwarded is judged by its principal alone (Kafka's ControllerApis: the protocol is the hop's)."""
    if token_authenticated:
        return False
    if forwarded:
        return True
    return security_protocol != "PLAINTEXT" and not (security_protocol == "SSL" and principal == ANONYMOUS)
