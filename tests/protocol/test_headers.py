"""Request/response headers: version choice per API, client id handling, unknown APIs."""

from __future__ import annotations

import pytest

from grete.protocol.codec import Writer
from grete.protocol.errors import ProtocolError
from grete.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)
from grete.protocol.messages import request_header_version, response_header_version


def test_header_versions() -> None:
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    assert request_header_version(7, 0) == 0 and request_header_version(7, 1) == 1
    assert request_header_version(18, 3) == 2
    assert response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert response_header_version(3, 9) == 1 and response_header_version(3, 8) == 0


def test_request_header_v1_round_trip() -> None:
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=3, api_version=1, correlation_id=42, client_id=None))
    data = w.getvalue()
    assert data == b"\x00\x03\x00\x01\x00\x00\x00\x2a\xff\xff"
    header, offset = decode_request_header(data + b"body")
    assert (header.api_key, header.correlation_id, header.client_id, header.header_version) == (3, 42, None, 1)
    assert offset == len(data)


def test_request_header_v2_keeps_unknown_tags() -> None:
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=3, api_version=12, correlation_id=1, client_id="c",
                                           unknown_tagged_fields=[(4, b"zz")]))
    header, offset = decode_request_header(b"pad" + w.getvalue(), 3)
    assert header.header_version == 2
    assert header.unknown_tagged_fields == [(4, b"zz")]
    assert offset == 3 + len(w.getvalue())


def test_controlled_shutdown_v0_has_no_client_id() -> None:
    header, offset = decode_request_header(b"\x00\x07\x00\x00\x00\x00\x00\x05" + b"\x00\x00\x00\x01")
    assert header.header_version == 0 and header.client_id is None and offset == 8


@pytest.mark.parametrize(("api_key", "version"), [(18, 99), (1000, 0), (-1, 0)])
def test_unknown_api_or_version_parses_v1_only(api_key: int, version: int) -> None:
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=api_key, api_version=version, correlation_id=9,
                                           client_id="x"), header_version=2)
    header, offset = decode_request_header(w.getvalue())
    assert not header.known and header.header_version == 1
    assert header.correlation_id == 9 and header.client_id == "x"
    assert offset == len(w.getvalue()) - 1  # the tag section was left for the caller


@pytest.mark.parametrize("data", [b"", b"\x00\x12\x00", b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x09ab",
                                  b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x05"])
def test_malformed_request_header(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request_header(data)


def test_response_headers() -> None:
    w = Writer()
    encode_response_header(w, 77, 0)
    assert w.getvalue() == b"\x00\x00\x00\x4d"
    w = Writer()
    encode_response_header(w, 77, 1)
    assert w.getvalue() == b"\x00\x00\x00\x4d\x00"
    assert decode_response_header(w.getvalue(), 1) == (77, 5)
