"""Envelope (58): v0, a request a KRaft broker forwards to the active controller of its quorum.

A Kafka 4 broker forwards the admin requests only a controller may carry out (CreateTopics,
DeleteTopics, CreatePartitions, ...) wrapped in an Envelope with the caller's principal and address
(Kafka's ForwardingManager); the controller handles the inner request as if the caller had sent it
and wraps the answer the same way. Served only by a controller of a quorum of several voters; an
inner API the controller does not take is INVALID_REQUEST on the Envelope, as Kafka's ControllerApis
answers; a voter that does not lead answers NOT_CONTROLLER.
"""

from __future__ import annotations

import inspect
import ipaddress

from grete.broker.requests.context import RequestContext, Session
from grete.broker.requests.registry import FORWARDED_APIS, api, handlers
from grete.broker.requests.services import Everything
from grete.protocol.codec import Message, Reader, Writer
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import ApiKey, EnvelopeRequest, EnvelopeResponse, response_header_version
from grete.protocol.principal_data import decode_principal_data


@api(ApiKey.ENVELOPE, 0, 0)
async def handle(ctx: RequestContext[Everything], request: EnvelopeRequest) -> EnvelopeResponse:
    driver = ctx.broker.quorum
    if driver is None or not driver.leads:
        return EnvelopeResponse(error_code=ErrorCode.NOT_CONTROLLER)
    try:
        header, pos = decode_request_header(request.request_data)
        handler = handlers().get(header.api_key)
        if header.api_key not in FORWARDED_APIS or handler is None or not (
                handler.min_version <= header.api_version <= handler.max_version):
            return EnvelopeResponse(error_code=ErrorCode.INVALID_REQUEST)
        inner_request = handler.request_cls.decode(Reader(request.request_data, pos),  # type: ignore[attr-defined]
                                                   header.api_version)
        principal, token_authenticated = decode_principal_data(request.request_principal)
        session = Session(listener=ctx.listener, security_protocol=ctx.session.security_protocol,
                          client_host=_address(request.client_host_address), principal=principal,
                          token_authenticated=token_authenticated, forwarded=True)
    except (KafkaError, ValueError, IndexError) as exc:
        return EnvelopeResponse(error_code=exc.code if isinstance(exc, KafkaError) else ErrorCode.INVALID_REQUEST)
    inner = RequestContext(broker=ctx.broker, api_key=header.api_key, api_version=header.api_version,
                           correlation_id=header.correlation_id, client_id=header.client_id, session=session)
    answered = handler.fn(inner, inner_request)
    response: Message = await answered if inspect.isawaitable(answered) else answered  # type: ignore[assignment]
    if _names_error(response, ErrorCode.NOT_CONTROLLER):
        # As Kafka's RequestChannel: the forwarding broker retries at the new controller.
        return EnvelopeResponse(error_code=ErrorCode.NOT_CONTROLLER)
    w = Writer()
    encode_response_header(w, header.correlation_id, response_header_version(header.api_key, header.api_version))
    response.encode(w, header.api_version)
    return EnvelopeResponse(response_data=bytes(w.getvalue()), error_code=ErrorCode.NONE)


def _names_error(message: object, error: ErrorCode) -> bool:
    """Whether ``error`` is anywhere in the answer (Kafka's AbstractResponse.errorCounts)."""
    if getattr(message, "error_code", None) == error:
        return True
    for value in vars(message).values() if hasattr(message, "__dict__") else _slots(message):
        if isinstance(value, list) and any(_names_error(item, error) for item in value if hasattr(item, "encode")):
            return True
    return False


def _slots(message: object) -> list[object]:
    return [getattr(message, name) for name in getattr(message, "__slots__", ())]


def _address(raw: bytes) -> str:
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return ""
