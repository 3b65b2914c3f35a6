"""TLS for SSL listeners: an ``ssl.SSLContext`` from Kafka's keys, and the principal of a client
certificate.

Keys are looked up per listener first (``listener.name.<listener>.ssl.keystore.location``), then
broker-wide, as Kafka does. Keystores: PEM files (``ssl.keystore.type=PEM``: key and certificate
chain in ``ssl.keystore.location``, or inline in ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``), and PKCS12 (read with ``cryptography``). JKS, Kafka's default
type, is Java's own format: refused with a clear error naming the alternatives.

The principal of an authenticated client certificate is ``User:`` + its subject as an RFC 2253
distinguished name (Kafka's DefaultKafkaPrincipalBuilder with ``ssl.principal.mapping.rules=DEFAULT``);
without a client certificate it is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from grete.broker.config import BrokerConfig, ConfigError

ANONYMOUS = "User:ANONYMOUS"
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def listener_value(config: BrokerConfig, listener: str, key: str) -> str | None:
    """``listener.name.<listener>.<key>``, else ``key``: Kafka's per-listener override."""
    specific = config.raw(f"listener.name.{listener.lower()}.{key}")
    return specific if specific is not None else config.raw(key)


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context an SSL listener serves with; raises ConfigError naming what is wrong."""
    def value(key: str) -> str | None:
        return listener_value(config, listener, key)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, value("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3", listener)
    ciphers = value("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
        except ssl.SSLError as exc:
            raise ConfigError(f"listener {listener}: ssl.cipher.suites: {exc}") from None
    _load_keystore(context, value, listener)
    client_auth = (value("ssl.client.auth") or "none").lower()
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}.get(client_auth, ssl.CERT_NONE)
    if client_auth != "none":
        _load_truststore(context, value, listener)
    return context


def _set_protocols(context: ssl.SSLContext, enabled: str, listener: str) -> None:
    versions = [_PROTOCOLS.get(p.strip()) for p in enabled.split(",") if p.strip()]
    if not versions or None in versions:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols {enabled!r}: TLSv1.2 and TLSv1.3 are supported")
    chosen = [v for v in versions if v is not None]
    context.minimum_version = min(chosen)
    context.maximum_version = max(chosen)


Lookup = Callable[[str], str | None]


def _load_keystore(context: ssl.SSLContext, get: Lookup, listener: str) -> None:
    kind = (get("ssl.keystore.type") or "JKS").upper()
    location, password = get("ssl.keystore.location"), get("ssl.keystore.password")
    key_password = get("ssl.key.password")
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if kind == "PEM" and inline_key and inline_chain:
        with _private_file(inline_chain.encode() + b"\n" + inline_key.encode()) as path:
            _load_chain(context, path, key_password, listener)
        return
    if not location:
        raise ConfigError(f"listener {listener}: an SSL listener needs ssl.keystore.location "
                          "(or ssl.keystore.key and ssl.keystore.certificate.chain with ssl.keystore.type=PEM)")
    if kind == "PEM":
        _load_chain(context, location, key_password, listener)
    elif kind == "PKCS12":
        pem = _pkcs12_to_pem(Path(location), password, listener)
        with _private_file(pem) as path:
            _load_chain(context, path, None, listener)
    else:
        raise ConfigError(f"listener {listener}: ssl.keystore.type {kind} is Java's own format; "
                          "use PKCS12 or PEM (keytool -importkeystore converts a JKS keystore)")


def _load_chain(context: ssl.SSLContext, path: str, password: str | None, listener: str) -> None:
    try:
        context.load_cert_chain(path, password=password)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the keystore: {exc}") from None


def _pkcs12_to_pem(path: Path, password: str | None, listener: str) -> bytes:
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(path.read_bytes(),
                                                            password.encode() if password else None)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"listener {listener}: cannot read the PKCS12 keystore {path}: {exc}") from None
    if key is None or cert is None:
        raise ConfigError(f"listener {listener}: the PKCS12 keystore {path} holds no key and certificate")
    parts = [cert.public_bytes(serialization.Encoding.PEM)]
    parts += [c.public_bytes(serialization.Encoding.PEM) for c in extra or []]
    parts.append(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return b"".join(parts)


def _load_truststore(context: ssl.SSLContext, get: Lookup, listener: str) -> None:
    kind = (get("ssl.truststore.type") or "JKS").upper()
    inline, location = get("ssl.truststore.certificates"), get("ssl.truststore.location")
    try:
        if kind == "PEM" and inline:
            context.load_verify_locations(cadata=inline)
        elif kind == "PEM" and location:
            context.load_verify_locations(cafile=location)
        elif kind == "PKCS12" and location:
            password = get("ssl.truststore.password")
            certs = pkcs12.load_pkcs12(Path(location).read_bytes(), password.encode() if password else None)
            cadata = "".join(c.certificate.public_bytes(serialization.Encoding.PEM).decode()
                             for c in certs.additional_certs)
            if certs.cert is not None:
                cadata += certs.cert.certificate.public_bytes(serialization.Encoding.PEM).decode()
            context.load_verify_locations(cadata=cadata)
        elif kind == "JKS":
            raise ConfigError(f"listener {listener}: ssl.truststore.type JKS is Java's own format; use PKCS12 or PEM")
        else:
            raise ConfigError(f"listener {listener}: ssl.client.auth needs a truststore (ssl.truststore.location "
                              "or ssl.truststore.certificates)")
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the truststore: {exc}") from None


@contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """Python's ssl loads keys from files only: a file only this process can read, removed at once."""
    fd, path = tempfile.mkstemp(prefix="grete-tls-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        os.unlink(path)


def principal_of(ssl_object: ssl.SSLObject | None) -> str:
    """``User:<RFC 2253 subject>`` of a verified client certificate, else ``User:ANONYMOUS``."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
