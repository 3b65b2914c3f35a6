"""DefaultPrincipalData v0, the principal an Envelope carries (grete/protocol/principal_data.py)."""

from __future__ import annotations

from grete.protocol.principal_data import decode_principal_data, encode_principal_data


def test_bytes_as_kafka_writes_them_and_back() -> None:
    raw = encode_principal_data("User:alice", True)
    # version 0, compact strings (length + 1), tokenAuthenticated, no tagged fields
    assert raw == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x01" + b"\x00"
    assert decode_principal_data(raw) == ("User:alice", True)


def test_an_envelope_without_a_principal_is_anonymous() -> None:
    assert decode_principal_data(None) == ("User:ANONYMOUS", False)
    assert decode_principal_data(b"") == ("User:ANONYMOUS", False)
