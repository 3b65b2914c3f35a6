"""Java KeyStore (JKS) files, read as Kafka's brokers read them (``ssl.keystore.type=JKS``, Kafka's
default, and ``ssl.truststore.type=JKS``): the private key with its certificate chain, and the
trusted certificates, turned into PEM for Python's ``ssl``.

The format is Sun's ``JavaKeyStore``: a header (magic 0xFEEDFEED, version 1 or 2, entry count), the
entries (1: a private key protected with Sun's key protector, then its certificate chain; 2: a
trusted certificate), and a SHA-1 digest of the password and everything before it, which proves the
store password. A private key is an EncryptedPrivateKeyInfo whose data is a 20-byte salt, the key
XORed with a SHA-1 keystream of the key password, and a SHA-1 check of the password and the key.
As Java's ``keystore.type.compat``, a file named JKS that is really PKCS12 (what keytool writes by
default since Java 9) is read as PKCS12 by the caller.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import serialization

MAGIC = 0xFEEDFEED
PRIVATE_KEY, TRUSTED_CERT = 1, 2
SUN_KEY_PROTECTOR = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1, DER content
DIGEST_SALT = b"Mighty Aphrodite"  # what Sun's JavaKeyStore mixes into the integrity digest


class JksError(ValueError):
    """Not a JKS file, a wrong password, or an entry this reader does not know."""


@dataclass
class JksStore:
    keys: list[tuple[bytes, list[bytes]]] = field(default_factory=list)  # (PKCS#8 DER key, chain as DER)
    trusted: list[bytes] = field(default_factory=list)  # certificates, DER


def is_jks(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack(">I", data[:4])[0] == MAGIC


def _password_bytes(password: str) -> bytes:
    return password.encode("utf-16-be")  # Java chars, two bytes each, big-endian


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise JksError("the keystore is truncated")
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk

    def int(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def utf(self) -> str:
        (size,) = struct.unpack(">H", self.take(2))
        return self.take(size).decode("utf-8", "replace")

    def blob(self) -> bytes:
        return self.take(self.int())


def load(data: bytes, store_password: str | None) -> JksStore:
    """Every entry of a JKS file; the store password, when given, is checked against its digest."""
    reader = _Reader(data)
    if reader.int() & 0xFFFFFFFF != MAGIC:
        raise JksError("not a JKS keystore")
    version = reader.int()
    if version not in (1, 2):
        raise JksError(f"JKS version {version} is not known")
    store = JksStore()
    for _ in range(reader.int()):
        tag = reader.int()
        reader.utf()  # alias
        reader.take(8)  # creation time
        if tag == PRIVATE_KEY:
            protected = reader.blob()
            chain = [_certificate(reader, version) for _ in range(reader.int())]
            store.keys.append((protected, chain))
        elif tag == TRUSTED_CERT:
            store.trusted.append(_certificate(reader, version))
        else:
            raise JksError(f"JKS entry type {tag} is not a private key or a certificate")
    if store_password is not None:
        expected = hashlib.sha1(_password_bytes(store_password) + DIGEST_SALT + data[:reader.at]).digest()
        if not hmac.compare_digest(expected, reader.take(20)):
            raise JksError("keystore password was incorrect")
    return store


def _certificate(reader: _Reader, version: int) -> bytes:
    if version == 2:
        kind = reader.utf()
        if kind != "X.509":
            raise JksError(f"certificate type {kind} is not X.509")
    return reader.blob()


def recover_key(protected: bytes, password: str) -> bytes:
    """The PKCS#8 key inside a JKS EncryptedPrivateKeyInfo (Sun's KeyProtector.recover)."""
    algorithm, data = _encrypted_private_key_info(protected)
    if algorithm != SUN_KEY_PROTECTOR:
        raise JksError("the private key is not protected with Sun's JKS key protector")
    if len(data) < 40:
        raise JksError("the protected private key is too short")
    salt, encrypted, check = data[:20], data[20:-20], data[-20:]
    secret, digest, stream = _password_bytes(password), salt, bytearray()
    while len(stream) < len(encrypted):
        digest = hashlib.sha1(secret + digest).digest()
        stream += digest
    key = bytes(a ^ b for a, b in zip(encrypted, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(secret + key).digest(), check):
        raise JksError("the key password was incorrect")
    return key


def _der(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``at``."""
    if at + 2 > len(data):
        raise JksError("the protected private key is not DER")
    tag, size, at = data[at], data[at + 1], at + 2
    if size & 0x80:
        count = size & 0x7F
        size, at = int.from_bytes(data[at:at + count], "big"), at + count
    if at + size > len(data):
        raise JksError("the protected private key is not DER")
    return tag, at, at + size


def _encrypted_private_key_info(der: bytes) -> tuple[bytes, bytes]:
    """(algorithm OID content, encrypted data) of SEQUENCE { SEQUENCE { OID, ... }, OCTET STRING }."""
    _, outer, _ = _der(der, 0)
    _, algorithm, after_algorithm = _der(der, outer)
    oid_tag, oid_start, oid_end = _der(der, algorithm)
    data_tag, data_start, data_end = _der(der, after_algorithm)
    if oid_tag != 0x06 or data_tag != 0x04:
        raise JksError("the protected private key is not an EncryptedPrivateKeyInfo")
    return der[oid_start:oid_end], der[data_start:data_end]


def key_and_chain_pem(data: bytes, store_password: str | None, key_password: str | None) -> bytes:
    """The store's private key (its first) with its chain, as PEM for ``load_cert_chain``."""
    store = load(data, store_password)
    if not store.keys:
        raise JksError("the keystore holds no private key")
    protected, chain = store.keys[0]
    password = key_password if key_password is not None else store_password
    if password is None:
        raise JksError("the private key needs ssl.key.password or ssl.keystore.password")
    key = serialization.load_der_private_key(recover_key(protected, password), None)
    certificates = [x509.load_der_x509_certificate(c).public_bytes(serialization.Encoding.PEM) for c in chain]
    return b"".join(certificates) + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption())


def trusted_pem(data: bytes, store_password: str | None) -> str:
    """The trusted certificate entries of a truststore (Java's trust anchors), as PEM."""
    store = load(data, store_password)
    if not store.trusted:
        raise JksError("the truststore holds no trusted certificate")
    return "".join(x509.load_der_x509_certificate(d).public_bytes(serialization.Encoding.PEM).decode()
                   for d in store.trusted)
