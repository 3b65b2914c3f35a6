"""DefaultPrincipalData v0 (flexible), as Kafka's DefaultKafkaPrincipalBuilder serializes the principal
an Envelope carries: type and name as compact strings, then tokenAuthenticated."""

from __future__ import annotations

from grete.protocol.codec import Reader, Writer

PRINCIPAL_DATA_VERSION = 0
ANONYMOUS = "User:ANONYMOUS"


def encode_principal_data(principal: str, token_authenticated: bool) -> bytes:
    kind, _, name = principal.partition(":")
    w = Writer()
    w.int16(PRINCIPAL_DATA_VERSION)
    w.string(kind, True)
    w.string(name, True)
    w.boolean(token_authenticated)
    w.tagged_fields((), None)
    return bytes(w.getvalue())


def decode_principal_data(raw: bytes | None) -> tuple[str, bool]:
    """(``Type:name``, tokenAuthenticated); ``User:ANONYMOUS`` when absent."""
    if not raw:
        return ANONYMOUS, False
    r = Reader(raw, 0)
    r.int16()  # the version
    kind = r.string(True)
    name = r.string(True)
    return f"{kind}:{name}", r.boolean()
