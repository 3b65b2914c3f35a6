"""A SCRAM client at the wire level (RFC 5802), with client-first extensions such as Kafka's
``tokenauth=true``: what the Java client sends for a delegation token (no Python client does)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Any

from grete.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def scram_login(wire: Any, mechanism: str, user: str, password: str, *, tokenauth: bool = False) -> Any:
    """Handshake and the two-step exchange on ``wire``; the last SaslAuthenticate answer (its
    error_code is 0 on success, and the server's signature has then been checked)."""
    digest = DIGESTS[mechanism]
    handshake = wire.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, 1)
    assert handshake.error_code == 0, handshake
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={user},r={nonce}" + (",tokenauth=true" if tokenauth else "")
    first = wire.call(SaslAuthenticateRequest(auth_bytes=f"n,,{bare}".encode()), SaslAuthenticateResponse, 1)
    if first.error_code:
        return first
    server_first = bytes(first.auth_bytes).decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    assert attrs["r"].startswith(nonce), server_first
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = wire.call(SaslAuthenticateRequest(
        auth_bytes=f"{without_proof},p={base64.b64encode(proof).decode()}".encode()), SaslAuthenticateResponse, 1)
    if final.error_code == 0:
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
        assert bytes(final.auth_bytes).decode() == f"v={expected}", "the server's signature does not verify"
    return final
