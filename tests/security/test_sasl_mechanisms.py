"""The SASL mechanisms and the per-connection state machine, sans I/O (grete/broker/security/sasl.py)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from scramp import ScramClient, ScramMechanism

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.security.sasl import (
    OAuthBearerServer,
    PlainServer,
    SaslAuthenticator,
    SaslFailure,
    ScramServer,
    State,
    UnsecuredJwsValidator,
    listener_sasl,
    parse_jaas,
    scram_keys,
)
from grete.coordinator.metadata import ScramCredential
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey

METADATA_KEY = 3


# --- JAAS -------------------------------------------------------------------------------------
def test_jaas_options_quoted_and_bare() -> None:
    section = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                         'username="admin" password="a;b \\"c\\"" user_alice="secret" user_bob=pw;')
    assert section.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert section.flag == "required"
    assert section.options == {"username": "admin", "password": 'a;b "c"', "user_alice": "secret", "user_bob": "pw"}


@pytest.mark.parametrize("text", ["", "PlainLoginModule", 'PlainLoginModule required user_a="x"',
                                  'A required x="1"; B required y="2";'])
def test_jaas_refuses_what_kafka_refuses(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_jaas(text)


# --- PLAIN ------------------------------------------------------------------------------------
def test_plain() -> None:
    users = {"alice": "secret"}
    ok = PlainServer(users)
    assert ok.evaluate(b"\x00alice\x00secret") == b""
    assert ok.complete and ok.username == "alice"
    assert PlainServer(users).evaluate(b"alice\x00alice\x00secret") == b""  # authzid = user
    for token, message in [(b"\x00alice\x00wrong", "Invalid username or password"),
                           (b"\x00mallory\x00secret", "Invalid username or password"),
                           (b"\x00\x00secret", "username not specified"),
                           (b"\x00alice\x00", "password not specified"),
                           (b"bob\x00alice\x00secret", "authorization id that is different"),
                           (b"alice\x00secret", "expected 3 tokens")]:
        server = PlainServer(users)
        with pytest.raises(SaslFailure, match=message):
            server.evaluate(token)
        assert not server.complete


# --- SCRAM ------------------------------------------------------------------------------------
def _credential(mechanism: str, password: str, iterations: int = 4096) -> ScramCredential:
    salt, stored, server, i = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations)
    return ScramCredential(salt, stored, server, i)


def _exchange(mechanism: str, password: str, stored: dict[str, ScramCredential]) -> ScramServer:
    server = ScramServer(mechanism, lambda user, mech: stored.get(user) if mech == mechanism else None)
    client = ScramClient([mechanism], "alice", password)
    first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(final.decode())  # raises unless the server proved it knows the key
    return server


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_success_and_failures(mechanism: str) -> None:
    stored = {"alice": _credential(mechanism, "alice-secret", 8192)}
    server = _exchange(mechanism, "alice-secret", stored)
    assert server.complete and server.username == "alice"
    with pytest.raises(SaslFailure, match="invalid credentials"):
        _exchange(mechanism, "wrong", stored)
    with pytest.raises(SaslFailure, match="invalid credentials"):
        _exchange(mechanism, "alice-secret", {})  # unknown user: the same vague message
    other = "SCRAM-SHA-512" if mechanism == "SCRAM-SHA-256" else "SCRAM-SHA-256"
    with pytest.raises(SaslFailure):  # a credential of the other mechanism does not serve this one
        _exchange(mechanism, "alice-secret", {"alice": _credential(other, "alice-secret")})


def test_scram_tokenauth_is_not_a_user_login_and_authzid_must_match() -> None:
    # tokenauth=true looks the name up as a delegation token id only (a user's credential never serves).
    stored = {"alice": _credential("SCRAM-SHA-256", "pw")}
    server = ScramServer("SCRAM-SHA-256", lambda user, mech: stored.get(user), lambda token, mech: None)
    with pytest.raises(SaslFailure):
        server.evaluate(b"n,,n=alice,r=abcdefgh,tokenauth=true")
    server = ScramServer("SCRAM-SHA-256", lambda user, mech: stored.get(user))
    with pytest.raises(SaslFailure, match="authorization id"):
        server.evaluate(b"n,a=bob,n=alice,r=abcdefgh")


def test_scram_keys_match_rfc5802_derivation() -> None:
    """AlterUserScramCredentials gets salt + SaltedPassword; the keys we derive must be the ones
    scramp derives from the password itself."""
    salt = b"0123456789abcdef"
    for mechanism, digest in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        salted = hashlib.pbkdf2_hmac(digest, b"pw", salt, 4096)
        expected = ScramMechanism(mechanism).make_auth_info("pw", iteration_count=4096, salt=salt)
        assert scram_keys(mechanism, salted) == (expected[1], expected[2])


# --- OAUTHBEARER ------------------------------------------------------------------------------
def _jws(claims: dict[str, object], header: dict[str, object] | None = None, signature: str = "") -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part(header or {'alg': 'none'})}.{part(claims)}.{signature}"


def _initial(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


NOW_MS = 1_700_000_000_000


def _oauth(**options: str) -> OAuthBearerServer:
    return OAuthBearerServer(UnsecuredJwsValidator(options, now_ms=lambda: NOW_MS))


def test_oauthbearer_unsecured_token() -> None:
    server = _oauth()
    assert server.evaluate(_initial(_jws({"sub": "alice", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000}))) == b""
    assert server.complete and server.username == "alice" and server.expires_ms == NOW_MS + 60_000


@pytest.mark.parametrize("claims,header,signature", [
    ({"sub": "alice", "exp": NOW_MS / 1000 - 1}, None, ""),              # expired
    ({"exp": NOW_MS / 1000 + 60}, None, ""),                              # no principal
    ({"sub": "alice"}, None, ""),                                         # no exp
    ({"sub": "alice", "exp": NOW_MS / 1000 + 60}, {"alg": "HS256"}, ""),  # not unsecured
    ({"sub": "alice", "exp": NOW_MS / 1000 + 60}, None, "c2ln"),          # a signature
    ({"sub": "alice", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000 + 30}, None, ""),  # issued in the future
])
def test_oauthbearer_refused_tokens_fail_after_the_error_challenge(claims: dict[str, object],
                                                                   header: dict[str, object] | None,
                                                                   signature: str) -> None:
    server = _oauth()
    challenge = server.evaluate(_initial(_jws(claims, header, signature)))
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert not server.complete
    with pytest.raises(SaslFailure, match="invalid_token"):
        server.evaluate(b"\x01")


def test_oauthbearer_scope_and_authzid() -> None:
    token = _jws({"sub": "alice", "exp": NOW_MS / 1000 + 60, "scope": "read"})
    challenge = _oauth(unsecuredValidatorRequiredScope="read write").evaluate(_initial(token))
    assert json.loads(challenge)["status"] == "insufficient_scope"
    ok = _jws({"sub": "alice", "exp": NOW_MS / 1000 + 60, "scope": ["read", "write"]})
    assert _oauth(unsecuredValidatorRequiredScope="read write").evaluate(_initial(ok)) == b""
    with pytest.raises(SaslFailure, match="authorization id"):
        _oauth().evaluate(_initial(ok, authzid="bob"))
    with pytest.raises(SaslFailure):
        _oauth().evaluate(b"n,,auth=Bearer x")  # not RFC 7628's framing


# --- configuration ----------------------------------------------------------------------------
def test_listener_configuration() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";'
    config = BrokerConfig({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                           "listener.name.client.plain.sasl.jaas.config": jaas,
                           "listener.name.client.scram-sha-256.connections.max.reauth.ms": "60000"})
    assert "listener.name.client.plain.sasl.jaas.config" not in config.unknown
    setup = listener_sasl(config, "CLIENT", lambda u, m: None)
    assert setup.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    assert setup.reauth_ms == {"PLAIN": 0, "SCRAM-SHA-256": 60000}
    assert setup.max_receive_size == 524288
    with pytest.raises(ConfigError, match="GSSAPI"):
        listener_sasl(BrokerConfig({}), "CLIENT", lambda u, m: None)  # Kafka's default mechanism
    with pytest.raises(ConfigError, match="PLAIN needs its users"):
        listener_sasl(BrokerConfig({"sasl.enabled.mechanisms": "PLAIN"}), "CLIENT", lambda u, m: None)
    with pytest.raises(ConfigError, match="DIGEST-MD5"):
        listener_sasl(BrokerConfig({"sasl.enabled.mechanisms": "DIGEST-MD5"}), "CLIENT", lambda u, m: None)


# --- the state machine ------------------------------------------------------------------------
class FakeSession:
    def __init__(self) -> None:
        self.principal = "User:ANONYMOUS"
        self.authenticated = True
        self.expires_at: float | None = None
        self.close_after_response = False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _authenticator(reauth_ms: str = "0") -> tuple[SaslAuthenticator, FakeSession, Clock]:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret" user_bob="pw";'
    setup = listener_sasl(BrokerConfig({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                                        "listener.name.client.plain.sasl.jaas.config": jaas,
                                        "connections.max.reauth.ms": reauth_ms}), "CLIENT", lambda u, m: None)
    session, clock = FakeSession(), Clock()
    return SaslAuthenticator(setup, session, clock=clock), session, clock


def test_state_machine_gate_and_success() -> None:
    auth, session, _ = _authenticator()
    assert not session.authenticated
    assert auth.admits(ApiKey.API_VERSIONS) and auth.admits(ApiKey.SASL_HANDSHAKE)
    assert not auth.admits(METADATA_KEY) and not auth.admits(ApiKey.SASL_AUTHENTICATE)
    assert auth.handshake("PLAIN", 1) == ErrorCode.NONE
    assert auth.state is State.AUTHENTICATE
    assert not auth.admits(METADATA_KEY) and not auth.admits(ApiKey.API_VERSIONS) and auth.admits(ApiKey.SASL_AUTHENTICATE)
    result = auth.authenticate(b"\x00alice\x00secret")
    assert result.error_code == 0 and result.session_lifetime_ms == 0
    assert session.authenticated and session.principal == "User:alice" and session.expires_at is None
    assert auth.admits(METADATA_KEY)


def test_state_machine_failures_close() -> None:
    auth, session, _ = _authenticator()
    assert auth.handshake("GSSAPI", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert session.close_after_response and not auth.admits(ApiKey.SASL_HANDSHAKE)
    auth, session, _ = _authenticator()
    auth.handshake("PLAIN", 1)
    result = auth.authenticate(b"\x00alice\x00nope")
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert session.close_after_response and not session.authenticated and session.principal == "User:ANONYMOUS"


def test_v0_handshake_means_raw_tokens() -> None:
    auth, session, _ = _authenticator()
    assert auth.handshake("PLAIN", 0) == ErrorCode.NONE
    assert auth.raw_tokens and not auth.admits(ApiKey.SASL_AUTHENTICATE)
    assert auth.authenticate(b"\x00alice\x00secret").error_code == 0
    assert not auth.raw_tokens and session.authenticated


def test_session_lifetime_and_reauthentication() -> None:
    auth, session, clock = _authenticator(reauth_ms="10000")
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\x00alice\x00secret").session_lifetime_ms == 10000
    assert session.expires_at == clock.now + 10
    clock.now += 11
    assert not auth.admits(METADATA_KEY)          # expired: the connection is closed
    assert auth.admits(ApiKey.SASL_HANDSHAKE)        # but a re-authentication may start
    assert auth.handshake("PLAIN", 1) == ErrorCode.NONE
    assert auth.authenticate(b"\x00alice\x00secret").error_code == 0
    assert session.expires_at == clock.now + 10 and auth.admits(METADATA_KEY)
    # A re-authentication may not change the principal, nor the mechanism.
    auth.handshake("PLAIN", 1)
    result = auth.authenticate(b"\x00bob\x00pw")
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "Cannot change principals" in str(
        result.error_message)
    assert session.close_after_response
    auth, session, _ = _authenticator()
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\x00alice\x00secret")
    assert auth.handshake("SCRAM-SHA-256", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert session.close_after_response
