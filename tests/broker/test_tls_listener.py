"""SSL listeners: stock clients over TLS (PEM and PKCS12 keystores, client authentication and its
principal), large Fetch answers encrypted on the wire, and bad TLS input refused without harm."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from cryptography import x509

from grete.broker.config import ConfigError
from grete.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from grete.testing import broker
from grete.testing._wire import Wire
from grete.testing.common import free_port
from tests.broker._tls import Certs, issue_server, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))



class TapProxy:
    """Forwards a port to the broker and keeps every byte the broker sent, as it crossed the wire."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.seen = bytearray()
        self._target = target
        self._server = socket.create_server(("127.0.0.1", port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(self._target)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.seen.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


def _ssl_client(bootstrap: str, certs: Certs, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca), **extra}


def _round_trip(bootstrap: str, conf: dict[str, Any], value: bytes) -> bytes:
    producer = Producer({**conf, "message.max.bytes": 2_000_000})
    producer.produce("secure", value=value, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "tls", "fetch.max.bytes": 4_000_000})
    consumer.assign([TopicPartition("secure", 0, 0)])
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None:
                assert message.error() is None, message.error()
                return bytes(message.value())
        raise AssertionError("nothing consumed over TLS")
    finally:
        consumer.close()


def test_large_fetch_answers_are_encrypted_on_the_wire(certs: Certs) -> None:
    """A 900 KB record produced and fetched over an SSL listener: the client gets it exactly, and
    the bytes that crossed the wire never contain it (the Fetch answer took the copy path, not a
    raw-socket sendfile under the TLS stream)."""
    proxy_port = free_port()
    overrides = {"listeners": "SSL://127.0.0.1:0", "advertised.listeners": f"SSL://127.0.0.1:{proxy_port}",
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
                 "message.max.bytes": "2000000"}
    with broker(overrides, topics={"secure": 1}) as b:
        bound = b.broker.bound[0]
        proxy = TapProxy(proxy_port, ("127.0.0.1", bound.port))
        try:
            marker = b"GRETE-PLAINTEXT-MARKER-"
            value = (marker * (900_000 // len(marker)))[:900_000]
            assert _round_trip(f"127.0.0.1:{proxy_port}", _ssl_client(f"127.0.0.1:{proxy_port}", certs), value) == value
        finally:
            proxy.close()
    assert len(proxy.seen) > 900_000  # the answer went through the tap
    assert marker not in proxy.seen


def test_pkcs12_keystore_and_client_certificates(certs: Certs) -> None:
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12",
                 "ssl.keystore.location": str(certs.server_p12), "ssl.keystore.password": "secret",
                 "ssl.client.auth": "required", "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": str(certs.ca)}
    with broker(overrides, topics={"secure": 1}) as b:
        conf = _ssl_client(b.bootstrap_servers, certs, **{"ssl.certificate.location": str(certs.client_cert),
                                                          "ssl.key.location": str(certs.client_key)})
        assert _round_trip(b.bootstrap_servers, conf, b"hello") == b"hello"
        holder = Producer(conf)  # a connection left open, to read its session's principal
        holder.list_topics(timeout=10)
        deadline = time.monotonic() + 10
        while not (principals := b.call(lambda: sorted({c.session.principal for c in b.broker.connections}))):
            assert time.monotonic() < deadline, "no open TLS connection"
            holder.poll(0.1)
        holder.flush(1)
        # RFC 2253 order (the certificate's RDN sequence reversed), as Java's X500Principal.getName().
        assert principals == ["User:OU=eng,CN=alice"]
        # Without a client certificate the handshake is refused; the broker keeps serving the others.
        anonymous = ssl.create_default_context(cafile=str(certs.ca))
        with socket.create_connection((b.host, b.port), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with anonymous.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")
                    if not tls.recv(4096):
                        raise ConnectionError("closed without an answer")
        assert _round_trip(b.bootstrap_servers, conf, b"again") == b"hello"  # still served (offset 0)


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("keytool") is None, reason="keytool (a JDK) is not installed")
def test_jks_stores_as_keytool_writes_them(certs: Certs, tmp_path: Path) -> None:
    """Kafka's default store type: a JKS keystore whose certificate is signed with SHA-1 (as client
    projects' test keystores are: OpenSSL's default level refuses it, Java's Kafka serves it) and a
    JKS truststore holding the CA of the client certificates."""
    keystore, truststore = tmp_path / "server.keystore.jks", tmp_path / "server.truststore.jks"
    _keytool("-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-sigalg", "SHA1withRSA",
             "-dname", "CN=localhost", "-validity", "2", "-storetype", "JKS", "-keystore", str(keystore),
             "-storepass", "store-secret", "-keypass", "key-secret")
    _keytool("-importcert", "-noprompt", "-alias", "caroot", "-file", str(certs.ca), "-storetype", "JKS",
             "-keystore", str(truststore), "-storepass", "trust-secret")
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore),
                 "ssl.keystore.password": "store-secret", "ssl.key.password": "key-secret",
                 "ssl.client.auth": "required", "ssl.truststore.location": str(truststore),
                 "ssl.truststore.password": "trust-secret"}
    with broker(overrides, topics={"secure": 1}) as b:
        conf = _ssl_client(b.bootstrap_servers, certs, **{
            "ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key),
            "enable.ssl.certificate.verification": False})  # a self-signed SHA-1 certificate
        assert _round_trip(b.bootstrap_servers, conf, b"from a jks") == b"from a jks"
    with pytest.raises(ConfigError, match="keystore password was incorrect"):
        with broker({**overrides, "ssl.keystore.password": "wrong"}):
            pass
    with pytest.raises(ConfigError, match="key password was incorrect"):
        with broker({**overrides, "ssl.key.password": "wrong"}):
            pass


def test_plaintext_and_garbage_on_a_tls_port(certs: Certs) -> None:
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.server)}
    with broker(overrides, topics={"secure": 1}) as b:
        for payload in (b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00", os.urandom(300)):
            with socket.create_connection((b.host, b.port), timeout=5) as raw:
                raw.sendall(payload)
                try:
                    answer = raw.recv(4096)
                except (ConnectionResetError, TimeoutError):
                    answer = b""
                assert b"\x12" not in answer[:8] or answer[:1] == b"\x15"  # a TLS alert at most, never a Kafka answer
        assert _round_trip(b.bootstrap_servers, _ssl_client(b.bootstrap_servers, certs), b"fine") == b"fine"


def test_ssl_listener_without_a_keystore_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        with broker({"listeners": "SSL://127.0.0.1:0"}):
            pass
    with pytest.raises(ConfigError, match="cannot read the keystore"):
        with broker({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(tmp_path / "k.jks")}):
            pass
    # A SASL listener with Kafka's default mechanism (GSSAPI) is refused, naming what grete serves.
    with pytest.raises(ConfigError, match="GSSAPI"):
        with broker({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}):
            pass


def _served_certificate(port: int, certs: Certs) -> x509.Certificate:
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _alter_broker(port: int, certs: Certs, name: str, key: str, value: str) -> Any:
    """IncrementalAlterConfigs SET of one key on a BROKER resource, over the SSL listener."""
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=4, resource_name=name, configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name=key, config_operation=0, value=value)])])
    wire = Wire("localhost", port, 10, "tls-test", ssl.create_default_context(cafile=str(certs.ca)))
    try:
        return wire.call(request, IncrementalAlterConfigsResponse, 1).responses[0]
    finally:
        wire.close()


def test_keystore_reloaded_by_alter_configs(certs: Certs, tmp_path: Path) -> None:
    """Kafka's dynamic keystore update: `listener.name.ssl.ssl.keystore.location` set on this broker
    serves new connections with the new certificate, open ones go on; a certificate for another
    subject, and the cluster-wide default, are refused and change nothing."""
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.server)}
    with broker(overrides, topics={"secure": 1}) as b:
        port = b.broker.bound[0].port
        first = _served_certificate(port, certs)
        renewed = issue_server(certs, tmp_path / "renewed.pem")
        held = Producer(_ssl_client(b.bootstrap_servers, certs))
        held.list_topics(timeout=10)  # a connection opened before the reload
        key = "listener.name.ssl.ssl.keystore.location"
        assert _alter_broker(port, certs, "", key, str(renewed)).error_code == 42  # per broker only
        other = issue_server(certs, tmp_path / "other.pem", common_name="someone-else")
        refused = _alter_broker(port, certs, str(b.broker.node_id), key, str(other))
        assert refused.error_code == 42 and "do not match" in refused.error_message
        assert _served_certificate(port, certs).serial_number == first.serial_number
        assert _alter_broker(port, certs, str(b.broker.node_id), key, str(renewed)).error_code == 0
        deadline = time.monotonic() + 10
        while _served_certificate(port, certs).serial_number == first.serial_number:
            assert time.monotonic() < deadline, "the new keystore is not served"
            time.sleep(0.1)
        assert _round_trip(b.bootstrap_servers, _ssl_client(b.bootstrap_servers, certs), b"after") == b"after"
        held.produce("secure", b"still open")
        assert held.flush(10) == 0


@pytest.mark.parametrize("rules, expected", [
    ("RULE:^OU=(.*?),CN=(.*?)$/$2@$1/U", "User:ALICE@ENG"),
    ("RULE:^CN=nobody$/x/,DEFAULT", "User:OU=eng,CN=alice"),
    ("RULE:^CN=nobody$/x/", None),  # no rule maps the name: the authentication fails
])
def test_principal_mapping_rules(certs: Certs, rules: str, expected: str | None) -> None:
    """``ssl.principal.mapping.rules`` as Kafka's SslPrincipalMapper applies them."""
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.server), "ssl.client.auth": "required",
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
                 "ssl.principal.mapping.rules": rules}
    with broker(overrides) as b:
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        with socket.create_connection((b.host, b.port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")  # ApiVersions v0
            answered = tls.recv(4096) if expected is not None else _closed_read(tls)
            principals = b.call(lambda: sorted({c.session.principal for c in b.broker.connections}))
        if expected is None:
            assert answered == b"" and principals == []
        else:
            assert answered and principals == [expected]


def _closed_read(tls: ssl.SSLSocket) -> bytes:
    try:
        return tls.recv(4096)
    except (ssl.SSLError, ConnectionError):
        return b""
