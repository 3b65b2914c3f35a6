"""A broker of the session's target with SASL listeners and Kafka's StandardAuthorizer, one per module.

``secure_broker``: PLAIN users admin (super user), alice and bob on SASL_PLAINTEXT and SASL_SSL (a
test CA made with ``cryptography`` for this module only), SCRAM-SHA-256/512 and OAUTHBEARER (Kafka's
unsecured-JWS validator) enabled, delegation tokens on (``TOKEN_SECRET``). The PLAINTEXT
listener stays for readiness and, on Kafka, the node's own inter-broker/controller traffic
(User:ANONYMOUS is a super user there, as tools/reference_kafka.py explains): tests use the SASL
ports only. grete gets the same keys as overrides.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import cluster
from grete.testing.routed_wire import RoutedWire
from tests.broker._tls import Certs, make_certs
from tools import kafka_dist
from tools.reference_kafka import (
    OAUTHBEARER_JAAS,
    SASL_MECHANISMS,
    STANDARD_AUTHORIZER,
    ReferenceKafka,
    Security,
    die_with_parent,
    free_port,
    stop_process,
)

REPO = Path(__file__).resolve().parents[2]
# One partition for the internal topics: Kafka creates 50 by default on the first commit/transaction.
INTERNAL = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}
# Delegation tokens enabled on both targets (test_security_delegation_tokens.py computes HMACs with it).
TOKEN_SECRET = "grete-token-secret"
TOKENS = {"delegation.token.secret.key": TOKEN_SECRET}
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
HOST = "127.0.0.1"


@dataclass
class SecureBroker:
    kind: str
    sasl_port: int
    sasl_ssl_port: int
    ca: Path  # the test CA's certificate (PEM), for SASL_SSL clients
    more_sasl_ports: tuple[int, ...] = ()  # a cluster's other brokers', after broker 1's
    more_sasl_ssl_ports: tuple[int, ...] = ()

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in (self.sasl_port, *self.more_sasl_ports))

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in (self.sasl_ssl_port, *self.more_sasl_ssl_ports))

    @property
    def is_grete(self) -> bool:
        return self.kind == "grete"

    def login(self, user: str, password: str | None = None) -> Wire | RoutedWire:
        """A wire connection authenticated with SASL/PLAIN as ``user``; on a cluster, one per broker,
        each request sent where a client would send it (admin asks where that is)."""
        def as_user(host: str, port: int) -> Wire:
            return _plain_login(host, port, user, password or USERS[user])

        if not self.more_sasl_ports:
            return as_user(HOST, self.sasl_port)
        return RoutedWire(HOST, self.sasl_port, connect=as_user,
                          lookup=lambda host, port: _plain_login(host, port, "admin", USERS["admin"]))


def _plain_login(host: str, port: int, user: str, password: str) -> Wire:
    wire = Wire(host, port, timeout=30.0)
    answer = wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
    assert answer.error_code == 0, answer
    done = wire.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), SaslAuthenticateResponse, 2)
    assert done.error_code == 0, done
    return wire


def _grete_overrides(plain: int, sasl: int, sasl_ssl: int, certs: Certs, data: Path) -> dict[str, str]:
    listeners = f"PLAINTEXT://{HOST}:{plain},SASL_PLAINTEXT://{HOST}:{sasl},SASL_SSL://{HOST}:{sasl_ssl}"
    security = Security(plain_users=USERS)
    overrides = {**INTERNAL, **TOKENS, "listeners": listeners, "advertised.listeners": listeners, "log.dirs": str(data),
                 "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
                 "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS",
                 "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                 "listener.name.sasl_ssl.ssl.keystore.location": str(certs.server)}
    for name in ("sasl_plaintext", "sasl_ssl"):
        overrides[f"listener.name.{name}.plain.sasl.jaas.config"] = security.jaas_plain()
        overrides[f"listener.name.{name}.oauthbearer.sasl.jaas.config"] = OAUTHBEARER_JAAS
    return overrides


def _serving(port: int) -> bool:
    try:
        wire = Wire(HOST, port, timeout=2.0)
    except OSError:
        return False
    try:
        return bool(wire.call(ApiVersionsRequest(), ApiVersionsResponse, 0).error_code == 0)
    except (OSError, ValueError, ConnectionError):
        return False
    finally:
        wire.close()


@pytest.fixture(scope="module")
def secure_broker(target: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    tmp = tmp_path_factory.mktemp("secure")
    certs = make_certs(tmp)
    if target == "grete-kraft":
        yield from _grete_kraft_cluster(tmp, certs)
        return
    if target != "grete":
        version = target.removeprefix("kafka-")
        try:
            kafka_dist.fetch(version)
        except Exception as exc:  # no mvn / no network
            pytest.skip(f"Kafka {version} jars unavailable: {exc}")
        security = Security(plain_users=USERS, ssl_keystore=certs.server)
        with ReferenceKafka(version, overrides={**INTERNAL, **TOKENS}, security=security, log_level="WARN") as ref:
            yield SecureBroker(ref.kind, ref.sasl_port, ref.sasl_ssl_port, certs.ca)
        return
    plain, sasl, sasl_ssl = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "grete.cli", "serve"]
    for key, value in _grete_overrides(plain, sasl, sasl_ssl, certs, tmp / "data").items():
        command += ["--override", f"{key}={value}"]
    log_path = tmp / "grete.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=REPO, start_new_session=True, preexec_fn=die_with_parent)
    try:
        deadline = time.monotonic() + 30
        while not _serving(plain):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"grete did not start: {log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield SecureBroker("grete", sasl, sasl_ssl, certs.ca)
    finally:
        stop_process(proc, grace=10.0)


def _grete_kraft_cluster(tmp: Path, certs: Certs) -> Iterator[SecureBroker]:
    """Three grete brokers under a grete controller, each with the single node's listeners and keys
    (the brokers' PLAINTEXT listener carries their own traffic, User:ANONYMOUS a super user as on
    Kafka); the controller gets the authorizer, the super users and the token secret, which it
    applies to what the brokers forward. Raw requests go where a client would send them."""
    ports = {b: (free_port(), free_port(), free_port()) for b in (1, 2, 3)}
    per_broker = {}
    for b, (plain, sasl, sasl_ssl) in ports.items():
        items = _grete_overrides(plain, sasl, sasl_ssl, certs, tmp / f"broker-{b}")
        del items["log.dirs"]
        per_broker[b] = items
    controller = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS", **TOKENS}
    with cluster(3, directory=tmp / "cluster", controllers=1, ports={b: p[0] for b, p in ports.items()},
                 broker_overrides=per_broker, controller_overrides=controller):
        _, sasl, sasl_ssl = ports[1]
        yield SecureBroker("grete", sasl, sasl_ssl, certs.ca, more_sasl_ports=(ports[2][1], ports[3][1]),
                           more_sasl_ssl_ports=(ports[2][2], ports[3][2]))
