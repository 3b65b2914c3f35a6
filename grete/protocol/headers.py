"""Request and response headers (hand-written: RequestHeader.json / ResponseHeader.json).

Request header v0 = api_key, api_version, correlation_id (only ControlledShutdown v0); v1 adds a
nullable client_id, which stays a classic int16-length string even in v2; v2 adds a tagged-field
section. Response header v0 = correlation_id; v1 adds a tagged-field section.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError
from grete.protocol.messages import APIS, request_header_version

_KEY_VERSION_CORRELATION: Final = struct.Struct(">hhi")
_CORRELATION: Final = struct.Struct(">i")


@dataclass(slots=True, kw_only=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    unknown_tagged_fields: list[tuple[int, bytes]] | None = None
    # Which header version was parsed. 1 for an api_key/version grete does not know: only the v1
    # fields were read, so the body offset is a guess the caller must not trust.
    header_version: int = 1
    known: bool = True


def decode_request_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[RequestHeader, int]:
    """Parse the request header at ``pos``; returns it and the offset where the body starts."""
    r = Reader(buf, pos)
    api_key, api_version, correlation_id = r.unpack(_KEY_VERSION_CORRELATION)
    info = APIS.get(api_key)
    known = info is not None and info.min_version <= api_version <= info.max_version
    version = request_header_version(api_key, api_version) if known else 1
    header = RequestHeader(api_key=api_key, api_version=api_version, correlation_id=correlation_id,
                           header_version=version, known=known)
    if version >= 1:
        header.client_id = r.nullable_string(False)
    if version >= 2:
        unknown = [(tag, data.tobytes()) for tag, data in r.tagged_fields()]
        header.unknown_tagged_fields = unknown or None
    return header, r.pos


def encode_request_header(w: Writer, header: RequestHeader, header_version: int | None = None) -> None:
    """Write a request header; the version defaults to the one the api_key/api_version needs."""
    version = header_version if header_version is not None else request_header_version(
        header.api_key, header.api_version)
    w.pack(_KEY_VERSION_CORRELATION, header.api_key, header.api_version, header.correlation_id)
    if version >= 1:
        w.string(header.client_id, False)
    if version >= 2:
        w.tagged_fields((), header.unknown_tagged_fields)


def encode_response_header(w: Writer, correlation_id: int, header_version: int) -> None:
    w.pack(_CORRELATION, correlation_id)
    if header_version >= 1:
        w.buf.append(0)  # no tagged fields


def decode_response_header(buf: bytes | bytearray | memoryview, header_version: int,
                           pos: int = 0) -> tuple[int, int]:
    """For clients and tests: returns (correlation_id, body offset)."""
    r = Reader(buf, pos)
    correlation_id = r.int32()
    if header_version >= 1:
        r.tagged_fields()
    if header_version not in (0, 1):
        raise ProtocolError(f"unknown response header version {header_version}")
    return correlation_id, r.pos
