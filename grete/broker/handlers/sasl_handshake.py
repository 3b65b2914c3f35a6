"""SaslHandshake (17): v1 starts a SASL exchange carried by SaslAuthenticate; v0 one whose tokens follow
as raw frames without Kafka headers (Kafka's legacy path, handled by the connection). On a listener
without SASL, Kafka answers ILLEGAL_SASL_STATE; a mechanism the listener does not enable gets
UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection is closed. On an
authenticated SASL connection a handshake starts a re-authentication (KIP-368)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Basics
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, SaslHandshakeRequest, SaslHandshakeResponse


@api(ApiKey.SASL_HANDSHAKE, 0, 1)
def handle(ctx: RequestContext[Basics], request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    sasl = ctx.session.sasl
    if sasl is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    code = sasl.handshake(request.mechanism, ctx.version)
    return SaslHandshakeResponse(error_code=code, mechanisms=list(sasl.setup.mechanisms))
