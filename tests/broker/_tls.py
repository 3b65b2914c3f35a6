"""A throwaway CA with server and client certificates for TLS tests, made at test time."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID


@dataclass
class Certs:
    ca: Path            # CA certificate (PEM)
    server: Path        # server key + chain (PEM)
    server_p12: Path    # the same as PKCS12, password "secret"
    client_cert: Path
    client_key: Path
    ca_key: Path        # to issue more certificates (tests of keystore reloads)


def _name(common: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    return x509.Name(attrs)


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(directory: Path) -> Certs:
    pem = serialization.Encoding.PEM
    plain = (pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("grete test CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name("localhost"), server_key, ca_name, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("alice", "eng"), client_key, ca_name, ca_key)
    paths = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.p12",
                  directory / "client.pem", directory / "client.key", directory / "ca.key")
    paths.ca_key.write_bytes(ca_key.private_bytes(*plain))
    paths.ca.write_bytes(ca.public_bytes(pem))
    paths.server.write_bytes(server_key.private_bytes(*plain) + server.public_bytes(pem) + ca.public_bytes(pem))
    paths.server_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", server_key, server, [ca], serialization.BestAvailableEncryption(b"secret")))
    paths.client_cert.write_bytes(client.public_bytes(pem))
    paths.client_key.write_bytes(client_key.private_bytes(*plain))
    return paths


def issue_server(certs: Certs, path: Path, common_name: str = "localhost") -> Path:
    """Another server keystore (PEM: new key, certificate and CA) signed by the test CA."""
    pem = serialization.Encoding.PEM
    plain = (pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    ca_key = serialization.load_pem_private_key(certs.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(_name(common_name), key, ca.subject, ca_key, server=True)
    path.write_bytes(key.private_bytes(*plain) + cert.public_bytes(pem) + ca.public_bytes(pem))
    return path
