"""TLS for SSL listeners: an ``ssl.SSLContext`` from Kafka's keys, and the principal of a client
certificate.

Keys are looked up per listener first (``listener.name.<listener>.ssl.keystore.location``), then
broker-wide, as Kafka does. Keystores: PEM files (``ssl.keystore.type=PEM``: key and certificate
chain in ``ssl.keystore.location``, or inline in ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``), PKCS12 (read with ``cryptography``) and JKS, Kafka's default
type (``grete.broker.network.jks``; a JKS-typed file that is really PKCS12 is read as such, as Java
does). A keystore certificate signed with SHA-1 or MD5, which OpenSSL's default security level
refuses and Java's Kafka serves (test suites' keystores are often such), is served too, with a warning.

The principal of an authenticated client certificate is ``User:`` + its subject as an RFC 2253
distinguished name, mapped by ``ssl.principal.mapping.rules`` (Kafka's DefaultKafkaPrincipalBuilder
and SslPrincipalMapper); without a client certificate it is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.network import jks, tls_records
from grete.broker.network.tls_offload import TlsProtocol, ktls_unavailable

log = logging.getLogger(__name__)

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
    configured = value("ssl.cipher.suites")
    ciphers = ":".join(c.strip() for c in configured.split(",") if c.strip()) if configured else ""
    if ciphers:
        try:
            context.set_ciphers(ciphers)
        except ssl.SSLError as exc:
            raise ConfigError(f"listener {listener}: ssl.cipher.suites: {exc}") from None
    try:
        _load_keystore(context, value, listener)
    except WeakCertificate as exc:
        log.warning("listener %s: %s; served anyway, as Java's Kafka serves it (OpenSSL security level 0 "
                    "for this listener)", listener, exc)
        context.set_ciphers((ciphers or "DEFAULT") + ":@SECLEVEL=0")
        _load_keystore(context, value, listener)
    client_auth = (value("ssl.client.auth") or "none").lower()
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}.get(client_auth, ssl.CERT_NONE)
    if client_auth != "none":
        _load_truststore(context, value, listener)
    return context


# The stores Kafka's SslFactory reconfigures at run time (SslConfigs.RECONFIGURABLE_CONFIGS), per listener.
RELOADABLE = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
              "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
              "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates")


class ListenerTls:
    """An SSL listener's context, replaceable while it serves (Kafka's dynamic keystore and
    truststore update): the context the server holds hands each new handshake the current one from
    its SNI callback, which OpenSSL runs for every ClientHello, so new connections get the reloaded
    stores and open ones go on with theirs."""

    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self.listener = listener
        self.context = server_context(config, listener)
        self.current = self.context
        self.context.sni_callback = self._hand_over
        self._stores = _stores(config, listener)
        rules = listener_value(config, listener, "ssl.principal.mapping.rules") or "DEFAULT"
        self.mapper = PrincipalMapper(rules)  # refused at start-up (ConfigError) when malformed
        self._reader = tls_records.select()
        log.info("listener %s: TLS records encrypted by OpenSSL off the event loop, read by the %s record "
                 "reader; kernel TLS not used: %s", listener, self._reader[0],
                 ktls_unavailable() or "grete has no kTLS transport")

    def protocol_factory(self, app_factory: Callable[[], asyncio.BufferedProtocol]) -> Callable[[], TlsProtocol]:
        """What the listener's server makes per accepted socket: the TLS record layer under the
        connection's protocol (grete.broker.network.tls_offload)."""
        return lambda: TlsProtocol(self.context, app_factory, self._reader[1])

    def principal_of(self, ssl_object: ssl.SSLObject | None) -> str:
        return principal_of(ssl_object, self.mapper)

    def _hand_over(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        if self.current is not self.context:
            ssl_object.context = self.current

    def check(self, config: BrokerConfig, proposed: BrokerConfig) -> None:
        """Refuse (ConfigError) stores ``proposed`` cannot load, or a keystore whose certificate
        names another subject or other alternative names than the one in force, as Kafka's
        SslFactory.validateReconfiguration does."""
        if _stores(proposed, self.listener) == self._stores:
            return
        server_context(proposed, self.listener)
        before, after = _leaf(config, self.listener), _leaf(proposed, self.listener)
        if before is not None and after is not None and _identity(before) != _identity(after):
            raise ConfigError(f"Validation of dynamic config update of SSLFactory failed: Keystore "
                              f"DistinguishedName or SubjectAltNames do not match: existing "
                              f"{_describe(before)}, new {_describe(after)}")

    def reload(self, config: BrokerConfig) -> bool:
        """Serve new connections with the stores ``config`` names, if they changed (a location whose
        file was rewritten counts as changed); False when nothing changed."""
        stores = _stores(config, self.listener)
        if stores == self._stores:
            return False
        self.current = server_context(config, self.listener)
        self._stores = stores
        return True


def _stores(config: BrokerConfig, listener: str) -> tuple[object, ...]:
    """What identifies the listener's stores: their settings, and the files' size and time."""
    values: list[object] = []
    for key in RELOADABLE:
        value = listener_value(config, listener, key)
        values.append(value)
        if value and key.endswith(".location"):
            try:
                stat = os.stat(value)
                values.append((stat.st_size, stat.st_mtime_ns))
            except OSError:
                values.append(None)
    return tuple(values)


def _leaf(config: BrokerConfig, listener: str) -> x509.Certificate | None:
    """The keystore's own certificate (the first of its chain), or None when it cannot be read."""
    def get(key: str) -> str | None:
        return listener_value(config, listener, key)
    try:
        kind = (get("ssl.keystore.type") or "JKS").upper()
        chain, location = get("ssl.keystore.certificate.chain"), get("ssl.keystore.location")
        if kind == "PEM" and chain:
            return x509.load_pem_x509_certificates(chain.encode())[0]
        if kind == "PEM" and location:
            return x509.load_pem_x509_certificates(Path(location).read_bytes())[0]
        if kind == "PKCS12" and location:
            password = get("ssl.keystore.password")
            _key, cert, _extra = pkcs12.load_key_and_certificates(Path(location).read_bytes(),
                                                                  password.encode() if password else None)
            return cert
    except (OSError, ValueError, IndexError):
        return None
    return None


def _identity(cert: x509.Certificate) -> tuple[str, frozenset[str]]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        alternatives = frozenset(str(n.value) for n in names)
    except x509.ExtensionNotFound:
        alternatives = frozenset()
    return cert.subject.rfc4514_string(), alternatives


def _describe(cert: x509.Certificate) -> str:
    subject, alternatives = _identity(cert)
    return f"DN={subject} SANs={sorted(alternatives)}"


def _set_protocols(context: ssl.SSLContext, enabled: str, listener: str) -> None:
    versions = [_PROTOCOLS.get(p.strip()) for p in enabled.split(",") if p.strip()]
    if not versions or None in versions:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols {enabled!r}: TLSv1.2 and TLSv1.3 are supported")
    chosen = [v for v in versions if v is not None]
    context.minimum_version = min(chosen)
    context.maximum_version = max(chosen)


Lookup = Callable[[str], str | None]


class WeakCertificate(ConfigError):
    """The keystore's certificate is signed with a digest (SHA-1, MD5) OpenSSL's level refuses."""


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
        return
    if kind not in ("PKCS12", "JKS"):
        raise ConfigError(f"listener {listener}: ssl.keystore.type {kind} is not served; use JKS, PKCS12 or PEM")
    data = _read_store(Path(location), "keystore", listener)
    if jks.is_jks(data):
        try:
            pem = jks.key_and_chain_pem(data, password, key_password)
        except (jks.JksError, ValueError) as exc:
            raise ConfigError(f"listener {listener}: cannot read the JKS keystore {location}: {exc}") from None
    else:
        pem = _pkcs12_to_pem(data, Path(location), password, listener)
    with _private_file(pem) as path:
        _load_chain(context, path, None, listener)


def _read_store(path: Path, what: str, listener: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"listener {listener}: cannot read the {what} {path}: {exc}") from None


def _load_chain(context: ssl.SSLContext, path: str, password: str | None, listener: str) -> None:
    try:
        context.load_cert_chain(path, password=password)
    except ssl.SSLError as exc:
        if "TOO_WEAK" in str(exc).upper():
            raise WeakCertificate(f"the keystore's certificate is refused by OpenSSL: {exc}") from None
        raise ConfigError(f"listener {listener}: cannot load the keystore: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"listener {listener}: cannot load the keystore: {exc}") from None


def _pkcs12_to_pem(data: bytes, path: Path, password: str | None, listener: str) -> bytes:
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
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
        elif kind in ("PKCS12", "JKS") and location:
            password = get("ssl.truststore.password")
            data = Path(location).read_bytes()
            if jks.is_jks(data):  # its trusted certificate entries, as Java's trust managers take them
                cadata = jks.trusted_pem(data, password)
            else:
                certs = pkcs12.load_pkcs12(data, password.encode() if password else None)
                cadata = "".join(c.certificate.public_bytes(serialization.Encoding.PEM).decode()
                                 for c in certs.additional_certs)
                if certs.cert is not None:
                    cadata += certs.cert.certificate.public_bytes(serialization.Encoding.PEM).decode()
            context.load_verify_locations(cadata=cadata)
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


def principal_of(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper | None = None) -> str:
    """``User:<name>`` of a verified client certificate, the name being its subject as an RFC 2253
    distinguished name mapped by ``ssl.principal.mapping.rules``; ``User:ANONYMOUS`` without one.
    Raises NoMatchingRule when no rule maps the name (Kafka fails the authentication)."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + (mapper.name(name) if mapper is not None else name)


class NoMatchingRule(Exception):
    pass


# Kafka's SslPrincipalMapper: DEFAULT, or RULE:pattern/replacement/[LU], comma-separated; a slash or
# backslash inside a pattern or replacement is escaped with a backslash.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")


@dataclass(frozen=True)
class _MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT, the name as it is
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` as Kafka applies them: the first rule whose pattern matches
    the whole distinguished name gives the principal name (Java's replaceAll, then L or U)."""

    def __init__(self, rules: str) -> None:
        self.rules = rules
        self._rules = _parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self._rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")


def _parse_rules(text: str) -> list[_MappingRule]:
    rules: list[_MappingRule] = []
    for match in _RULE_SPLITTER.finditer(text.strip()):
        if not match.group(1):
            continue
        if match.group(2):
            rules.append(_MappingRule(None))
        elif match.group(6):
            raise ConfigError(f"ssl.principal.mapping.rules: Invalid rule: {match.group(6)}")
        else:
            try:
                pattern = re.compile(_unescape(match.group(3)))
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: invalid pattern {match.group(3)!r}: {exc}") from None
            rules.append(_MappingRule(pattern, _python_replacement(_unescape(match.group(4))), match.group(5)))
    if not rules:
        raise ConfigError(f"ssl.principal.mapping.rules: no rule in {text!r}")
    return rules


def _unescape(text: str) -> str:
    """The rule syntax's escaped slash (``\\/``) is a plain slash in the regex or replacement."""
    return text.replace("\\/", "/")


def _python_replacement(java: str) -> str:
    """Java's replacement syntax (``$1``, ``\\$``) in Python's (``\\g<1>``, ``$``)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(re.escape(java[i + 1]) if java[i + 1] != "\\" else "\\\\")
            i += 2
        elif c == "$" and i + 1 < len(java) and java[i + 1].isdigit():
            j = i + 1
            while j < len(java) and java[j].isdigit():
                j += 1
            out.append(f"\\g<{java[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)
