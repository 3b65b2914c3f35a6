"""A client's request as a KRaft broker forwards it to the active controller (Kafka's
ForwardingManager): wrapped in an Envelope with the caller's principal (DefaultPrincipalData, as
Kafka's DefaultKafkaPrincipalBuilder serializes it) and address, so the controller carries it out,
authorizes it and answers as if the caller had sent it; the answer comes back wrapped the same way.
"""

from __future__ import annotations

import ipaddress

from grete.protocol.codec import Message, Reader, Writer
from grete.protocol.headers import RequestHeader, decode_response_header, encode_request_header
from grete.protocol.messages import (
    APIS,
    EnvelopeRequest,
    EnvelopeResponse,
    request_header_version,
    response_header_version,
)
from grete.protocol.principal_data import encode_principal_data


def envelope(request: Message, version: int, client_id: str | None, principal: str, token_authenticated: bool,
             client_host: str) -> EnvelopeRequest:
    api_key = type(request).API_KEY
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=api_key, api_version=version, correlation_id=0,
                                           client_id=client_id), request_header_version(api_key, version))
    request.encode(w, version)
    try:
        address = ipaddress.ip_address(client_host).packed
    except ValueError:
        address = b""
    return EnvelopeRequest(request_data=bytes(w.getvalue()), request_principal=encode_principal_data(principal,
                           token_authenticated), client_host_address=address)


def unwrap(response: EnvelopeResponse, api_key: int, version: int) -> Message:
    """The controller's answer to the forwarded request (the Envelope's own error checked first)."""
    data = bytes(response.response_data or b"")
    _correlation_id, pos = decode_response_header(data, response_header_version(api_key, version))
    answer: Message = APIS[api_key].response.decode(Reader(data, pos), version)
    return answer
