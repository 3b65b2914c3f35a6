"""SASL on SASL_PLAINTEXT and SASL_SSL listeners, sans I/O: the mechanisms (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER), their configuration from Kafka's keys, and each connection's authentication state
machine (Kafka's ``SaslServerAuthenticator``).

Configuration, per listener, as Kafka reads it:

- ``sasl.enabled.mechanisms`` (``listener.name.<l>.sasl.enabled.mechanisms`` first). Kafka's default
  is GSSAPI (Kerberos), which grete does not serve: a SASL listener with GSSAPI enabled is refused at
  start, naming the mechanisms grete has.
- ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (else grete's fallback ``sasl.jaas.config``):
  one login module. PLAIN's users are its ``user_<name>="<password>"`` options; OAUTHBEARER's
  validator takes Kafka's ``unsecuredValidator*`` options; SCRAM's credentials live in the
  metadata store (AlterUserScramCredentials), so its JAAS section is optional.
- ``connections.max.reauth.ms`` (``listener.name.<l>.<mechanism>.connections.max.reauth.ms`` first):
  KIP-368's session lifetime.

The state machine, per connection (``SaslAuthenticator``):

- HANDSHAKE: ApiVersions (any number of times) and SaslHandshake are admitted; anything else closes
  the connection without an answer, as Kafka does ("Unexpected Kafka request of type X during SASL
  handshake").
- SaslHandshake v1 -> AUTHENTICATE: only SaslAuthenticate is admitted. SaslHandshake v0 -> the
  client's next frames are raw SASL tokens without a Kafka header (Kafka's legacy path), answered
  with raw size-prefixed frames (``raw_tokens``). An unknown mechanism is answered with
  UNSUPPORTED_SASL_MECHANISM and the enabled list, then the connection is closed.
- A failed exchange is answered with SASL_AUTHENTICATION_FAILED (58) and a deliberately vague
  message, then the connection is closed.
- COMPLETE: the session carries ``User:<name>``; with a session lifetime, a request other than a
  re-authentication (a new SaslHandshake with the same mechanism, which must end in the same
  principal) after expiry closes the connection.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from scramp import ScramException, ScramMechanism

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.security.delegation_tokens import TokenCredential
from grete.coordinator.metadata import ScramCredential
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = "GSSAPI"
SUPPORTED = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384  # Kafka's ScramMechanism bounds
SCRAM_HASHES: dict[str, Callable[..., Any]] = {SCRAM_SHA_256: hashlib.sha256, SCRAM_SHA_512: hashlib.sha512}



class SaslFailure(Exception):
    """The exchange failed: answered with SASL_AUTHENTICATION_FAILED and this message, then closed."""


def vague(mechanism: str) -> str:
    """Kafka's message for a failed exchange that must not say whether the user exists."""
    return (f"Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


# --- JAAS -----------------------------------------------------------------------------------------
_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


@dataclass(frozen=True, slots=True)
class JaasSection:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas(text: str) -> JaasSection:
    """``<LoginModule> <flag> key="value" ...;``: Kafka's ``sasl.jaas.config``, exactly one module."""
    head = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if head is None:
        raise ConfigError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
    rest = text[head.end():]
    options: dict[str, str] = {}
    pos = 0
    while True:
        match = _JAAS_OPTION.match(rest, pos)
        if match is None:
            break
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[match.group(1)] = value
        pos = match.end()
    tail = rest[pos:].strip()
    if tail != ";":
        raise ConfigError("sasl.jaas.config: one login module ending with ';' expected, found "
                          f"{tail[:40]!r}")
    return JaasSection(head.group(1), head.group(2), options)


# --- mechanisms -----------------------------------------------------------------------------------
class MechanismServer(Protocol):
    """One exchange: ``evaluate`` takes each client token and returns the server's challenge; raises
    SaslFailure. ``complete`` once the client is authenticated; then ``username`` is set, and
    ``expires_ms`` (wall-clock ms) when the credential itself expires (an OAuth token)."""

    complete: bool
    username: str | None
    expires_ms: int | None
    token_authenticated: bool

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """RFC 4616: ``authzid NUL authcid NUL passwd``; one message, an empty answer."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None
        self.expires_ms: int | None = None
        self.token_authenticated = False

    def evaluate(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", "replace").split("\x00")
        if len(parts) != 3:
            raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compared in constant time, against a dummy for an unknown user, so that timing tells
        # nothing about which users exist.
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" * 16).encode())
        if expected is None or not ok:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        self.username = username
        self.complete = True
        return b""


CredentialLookup = Callable[[str, str], ScramCredential | None]
TokenLookup = Callable[[str, str], TokenCredential | None]


class ScramServer:
    """RFC 5802 through ``scramp``, against Kafka-stored credentials (salt, stored key, server key,
    iterations): client-first -> server-first, client-final -> server-final. With the client-first
    extension ``tokenauth=true`` the user name is a delegation token's id and the credential the
    token's; the principal is then the token's owner (Kafka's ScramSaslServer)."""

    def __init__(self, mechanism: str, credentials: CredentialLookup, tokens: TokenLookup | None = None) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._tokens = tokens
        self._server = ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self.complete = False
        self.username: str | None = None
        self.expires_ms: int | None = None
        self.token_authenticated = False

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int] | None:
        if self.token_authenticated:
            token = self._tokens(username, self.mechanism) if self._tokens is not None else None
            if token is None:
                return None
            credential = token.credential
            self.username, self.expires_ms = token.owner_name, token.expiry_ms
        else:
            found = self._credentials(username, self.mechanism)
            if found is None:
                return None
            credential = found
            self.username = username
        if credential.iterations < SCRAM_MIN_ITERATIONS:
            self.username = None
            return None
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._step == 0:
                bare = self._check_client_first(message)
                if bare is None:
                    self._server.set_client_first(message)
                else:
                    # scramp reads one-letter attributes only: it gets the message without the
                    # extensions, and the AuthMessage the proofs sign is the client's own bare
                    # message, extensions included (RFC 5802 section 3).
                    self._server.set_client_first(message[:len(message) - len(bare)]
                                                  + ",".join(bare.split(",")[:2]))
                    self._server.client_first_bare = bare
                self._step = 1
                return str(self._server.get_server_first()).encode()
            if self._step == 1:
                self._server.set_client_final(message)
                final = str(self._server.get_server_final())
                self._step = 2
                self.complete = True
                return final.encode()
        except (ScramException, UnicodeDecodeError, ValueError):
            self.username = None
            raise SaslFailure(vague(self.mechanism)) from None
        raise SaslFailure(vague(self.mechanism))

    def _check_client_first(self, message: str) -> str | None:
        """Kafka's checks of client-first: an authorization id must be the user itself. Extensions
        after the nonce (``tokenauth=true`` for delegation tokens; others are ignored, as Kafka
        does): the bare message when there are any, else None."""
        gs2, _, bare = message.partition(",")
        authzid, _, bare = bare.partition(",")
        if gs2 != "n":
            raise SaslFailure(vague(self.mechanism))
        attributes = bare.split(",")
        if len(attributes) < 2 or not attributes[0].startswith("n=") or not attributes[1].startswith("r="):
            raise SaslFailure(vague(self.mechanism))
        extensions = dict(a.partition("=")[::2] for a in attributes[2:])
        self.token_authenticated = extensions.get("tokenauth", "").lower() == "true"
        if authzid:
            name = attributes[0][2:]
            if authzid[2:] != name.replace("=2C", ",").replace("=3D", "="):
                raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                                  "different from username")
        return bare if extensions else None


def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a SaltedPassword, as AlterUserScramCredentials derives them."""
    digest = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    return digest(client_key).digest(), hmac.new(salted_password, b"Server Key", digest).digest()


# --- OAUTHBEARER ----------------------------------------------------------------------------------
class TokenInvalid(Exception):
    """The token was refused; ``error`` is the JSON object of the server's challenge (RFC 7628)."""

    def __init__(self, error: dict[str, str], why: str) -> None:
        super().__init__(why)
        self.error = error


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal: str
    expires_ms: int


class TokenValidator(Protocol):
    """The hook for a real validator (signed JWTs against a JWKS, ...); raises TokenInvalid."""

    def validate(self, token: str) -> ValidatedToken: ...


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class UnsecuredJwsValidator:
    """Kafka's default: ``OAuthBearerUnsecuredValidatorCallbackHandler`` (alg ``none``, empty
    signature, a string principal claim, ``exp`` required and not passed, ``iat`` not in the future,
    and the required scope), with its JAAS options."""

    def __init__(self, options: dict[str, str], now_ms: Callable[[], int] | None = None) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = options.get("unsecuredValidatorRequiredScope", "").split()
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))

    def validate(self, token: str) -> ValidatedToken:
        invalid = {"status": "invalid_token"}
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid(invalid, "the token is not three dot-separated parts")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, binascii.Error):
            raise TokenInvalid(invalid, "the token's header or claims are not base64url JSON") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise TokenInvalid(invalid, "the token's header and claims must be JSON objects")
        if header.get("alg") != "none" or parts[2]:
            raise TokenInvalid(invalid, "an unsecured token must have alg 'none' and no signature")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise TokenInvalid(invalid, f"the principal claim '{self.principal_claim}' is missing")
        now = self._now_ms()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenInvalid(invalid, "the 'exp' claim is missing or not a number")
        expires_ms = int(exp * 1000)
        if now - self.skew_ms >= expires_ms:
            raise TokenInvalid(invalid, "the token has expired")
        if iat is not None:
            if not isinstance(iat, int | float) or isinstance(iat, bool):
                raise TokenInvalid(invalid, "the 'iat' claim is not a number")
            if int(iat * 1000) > now + self.skew_ms:
                raise TokenInvalid(invalid, "the token was issued in the future")
            if expires_ms <= int(iat * 1000):
                raise TokenInvalid(invalid, "the token expires before it was issued")
        if self.required_scope:
            raw = claims.get(self.scope_claim)
            scope = raw.split() if isinstance(raw, str) else [s for s in raw if isinstance(s, str)] \
                if isinstance(raw, list) else []
            if not all(s in scope for s in self.required_scope):
                raise TokenInvalid({"status": "insufficient_scope", "scope": " ".join(self.required_scope)},
                                   "the token lacks the required scope")
        return ValidatedToken(principal, expires_ms)


_OAUTH_KEY = re.compile(r"[A-Za-z]+")


class OAuthBearerServer:
    """RFC 7628's client initial response ``n,[a=<authzid>],^Aauth=Bearer <token>^A...^A^A``; a refused
    token gets its JSON error as a challenge, the client answers ``^A``, then the exchange fails."""

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._error: str | None = None
        self.complete = False
        self.username: str | None = None
        self.expires_ms: int | None = None
        self.token_authenticated = False

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:
            raise SaslFailure(self._error)
        text = token.decode("utf-8", "replace")
        match = re.fullmatch(r"n,(a=[^,]*)?,\x01((?:[^\x01]*\x01)*)\x01", text, re.S)
        if match is None:
            raise SaslFailure("Invalid OAUTHBEARER client first message")
        authzid = (match.group(1) or "")[2:]
        pairs: dict[str, str] = {}
        for item in match.group(2).split("\x01"):
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep or not _OAUTH_KEY.fullmatch(key):
                raise SaslFailure("Invalid OAUTHBEARER client first message")
            pairs[key] = value
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslFailure("Invalid OAUTHBEARER client first message: no 'auth=Bearer' value")
        try:
            valid = self._validator.validate(auth[len("Bearer "):].strip())
        except TokenInvalid as exc:
            self._error = json.dumps(exc.error, separators=(",", ":"))
            return self._error.encode()
        if authzid and authzid != valid.principal:
            raise SaslFailure(f"Authentication failed: Client requested an authorization id ({authzid}) "
                              f"that is different from the token's principal name ({valid.principal})")
        self.username = valid.principal
        self.expires_ms = valid.expires_ms
        self.complete = True
        return b""


# --- a listener's SASL configuration --------------------------------------------------------------
def _listener_value(config: BrokerConfig, listener: str, key: str) -> str | None:
    specific = config.raw(f"listener.name.{listener.lower()}.{key}")
    return specific if specific is not None else config.raw(key)


@dataclass(slots=True)
class ListenerSasl:
    """What one SASL listener serves: its mechanisms, each with a server factory and a
    ``connections.max.reauth.ms`` (0: sessions do not expire)."""

    listener: str
    mechanisms: list[str]
    factories: dict[str, Callable[[], MechanismServer]] = field(default_factory=dict)
    reauth_ms: dict[str, int] = field(default_factory=dict)
    max_receive_size: int = 524288

    def authenticator(self, session: SessionLike, on_complete: Callable[[], None] | None = None) -> SaslAuthenticator:
        """A new connection's state machine (the connection imports this module only for typing)."""
        return SaslAuthenticator(self, session, on_complete)


def listener_sasl(config: BrokerConfig, listener: str, credentials: CredentialLookup,
                  validator: TokenValidator | None = None, tokens: TokenLookup | None = None) -> ListenerSasl:
    """The SASL setup of ``listener``; ConfigError naming the key when Kafka's keys ask for
    something grete cannot serve (GSSAPI, an unknown mechanism, PLAIN without users)."""
    raw = _listener_value(config, listener, "sasl.enabled.mechanisms") or ""
    mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
    if not mechanisms:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
    if GSSAPI in mechanisms:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms includes GSSAPI (Kerberos, Kafka's "
                          f"default), which grete does not support; set sasl.enabled.mechanisms to some of "
                          f"{', '.join(SUPPORTED)}")
    unknown = [m for m in mechanisms if m not in SUPPORTED]
    if unknown:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms: unsupported mechanism(s) "
                          f"{', '.join(unknown)} (grete serves {', '.join(SUPPORTED)})")
    setup = ListenerSasl(listener, mechanisms,
                         max_receive_size=config.get_int("sasl.server.max.receive.size"))
    for mechanism in mechanisms:
        prefix = f"listener.name.{listener.lower()}.{mechanism.lower()}."
        jaas_text = config.raw(prefix + "sasl.jaas.config") or config.raw("sasl.jaas.config")
        jaas = parse_jaas(jaas_text) if jaas_text else None
        reauth = config.raw(prefix + "connections.max.reauth.ms") or _listener_value(
            config, listener, "connections.max.reauth.ms") or "0"
        setup.reauth_ms[mechanism] = int(reauth)
        setup.factories[mechanism] = _factory(listener, mechanism, jaas, credentials, validator, tokens)
    return setup


def _factory(listener: str, mechanism: str, jaas: JaasSection | None, credentials: CredentialLookup,
             validator: TokenValidator | None, tokens: TokenLookup | None) -> Callable[[], MechanismServer]:
    if mechanism == PLAIN:
        if jaas is None:
            raise ConfigError(f"listener {listener}: PLAIN needs its users in "
                              f"listener.name.{listener.lower()}.plain.sasl.jaas.config "
                              "(org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>=\"...\";)")
        users = {k[len("user_"):]: v for k, v in jaas.options.items() if k.startswith("user_")}
        return lambda: PlainServer(users)
    if mechanism in SCRAM_MECHANISMS:
        return lambda: ScramServer(mechanism, credentials, tokens)
    chosen = validator or UnsecuredJwsValidator(jaas.options if jaas is not None else {})
    return lambda: OAuthBearerServer(chosen)


# --- a connection's state machine -----------------------------------------------------------------
class State(Enum):
    HANDSHAKE = "handshake"            # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"      # SaslAuthenticate (or raw tokens after handshake v0)
    COMPLETE = "complete"
    REAUTHENTICATE = "reauthenticate"  # a re-authentication's SaslAuthenticate on a live session
    FAILED = "failed"


class SessionLike(Protocol):
    """The connection's session, as the authenticator updates it (``context.Session``)."""

    principal: str
    authenticated: bool
    token_authenticated: bool
    expires_at: float | None
    close_after_response: bool


@dataclass(slots=True)
class AuthResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


class SaslAuthenticator:
    """One connection's SASL state (see the module's docstring for the rules)."""

    def __init__(self, setup: ListenerSasl, session: SessionLike,
                 on_complete: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.setup = setup
        self.session = session
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False  # after SaslHandshake v0: tokens travel without Kafka headers
        self._server: MechanismServer | None = None
        self._on_complete = on_complete
        self._clock = clock
        self._wall_ms = wall_ms
        session.authenticated = False

    # --- the pipeline's gate ---------------------------------------------------------------------
    def admits(self, api_key: int) -> bool:
        """May this request be served now? False: Kafka closes the connection without an answer."""
        state = self.state
        if state is State.HANDSHAKE:
            return api_key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE)
        if state is State.AUTHENTICATE:
            return api_key == ApiKey.SASL_AUTHENTICATE and not self.raw_tokens
        if state is State.FAILED:
            return False
        expires = self.session.expires_at
        if state is State.COMPLETE and expires is not None and api_key != ApiKey.SASL_HANDSHAKE \
                and self._clock() >= expires:
            return False  # "Disconnecting expired channel"
        return True

    def answers_illegal_state(self) -> bool:
        """A request ``admits`` refused in the middle of an exchange (after SaslHandshake v1) is
        answered with ILLEGAL_SASL_STATE before the close; elsewhere Kafka closes without a word."""
        return self.state is State.AUTHENTICATE and not self.raw_tokens

    # --- SaslHandshake -------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int) -> int:
        """The handshake's error code; the enabled list goes with it either way."""
        if self.state is State.COMPLETE:  # re-authentication (KIP-368)
            if mechanism != self.mechanism or version == 0:
                self._fail()
                return ErrorCode.UNSUPPORTED_SASL_MECHANISM
            self._server = self.setup.factories[mechanism]()
            self.state = State.REAUTHENTICATE
            return ErrorCode.NONE
        if self.state is not State.HANDSHAKE:
            self._fail()
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.setup.factories:
            self._fail()
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self._server = self.setup.factories[mechanism]()
        self.state = State.AUTHENTICATE
        self.raw_tokens = version == 0
        return ErrorCode.NONE

    # --- SaslAuthenticate / raw tokens ---------------------------------------------------------
    def authenticate(self, token: bytes) -> AuthResult:
        server = self._server
        if server is None or self.state not in (State.AUTHENTICATE, State.REAUTHENTICATE):
            self._fail()
            return AuthResult(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", b"")
        assert self.mechanism is not None
        try:
            challenge = server.evaluate(token)
        except SaslFailure as exc:
            self._fail()
            return AuthResult(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b"")
        if not server.complete:
            return AuthResult(ErrorCode.NONE, None, challenge)
        principal = f"User:{server.username}"
        if self.state is State.REAUTHENTICATE and principal != self.session.principal:
            self._fail()
            return AuthResult(ErrorCode.SASL_AUTHENTICATION_FAILED,
                              f"Cannot change principals during re-authentication from "
                              f"{self.session.principal}: {principal}", b"")
        lifetime = self._lifetime_ms(server.expires_ms)
        self.session.principal = principal
        # A credential that has already expired (a delegation token not yet swept) gives a session
        # that ends at once, as Kafka's: lifetime 0 then means "now", not "for ever".
        bounded = bool(lifetime) or server.expires_ms is not None
        self.session.expires_at = self._clock() + lifetime / 1000 if bounded else None
        self.session.token_authenticated = server.token_authenticated
        self.session.authenticated = True
        self.state = State.COMPLETE
        self.raw_tokens = False
        self._server = None
        if self._on_complete is not None:
            self._on_complete()
        return AuthResult(ErrorCode.NONE, None, challenge, lifetime)

    def _lifetime_ms(self, credential_expires_ms: int | None) -> int:
        """KIP-368: the smaller of connections.max.reauth.ms and the credential's remaining life;
        0 when neither applies; never negative."""
        assert self.mechanism is not None
        bounds = [ms for ms in (self.setup.reauth_ms.get(self.mechanism, 0),) if ms > 0]
        if credential_expires_ms is not None:
            bounds.append(max(0, credential_expires_ms - self._wall_ms()))
        return min(bounds) if bounds else 0

    def _fail(self) -> None:
        self.state = State.FAILED
        self._server = None
        self.session.authenticated = False
        self.session.close_after_response = True
