"""SaslAuthenticate (36): one SASL token each way. v1+ carry the session lifetime (KIP-368) once the
exchange completes. A failed exchange is answered with SASL_AUTHENTICATION_FAILED and a message,
then the connection is closed; on a listener without SASL, ILLEGAL_SASL_STATE as in Kafka."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Basics
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse


@api(ApiKey.SASL_AUTHENTICATE, 0, 2)
def handle(ctx: RequestContext[Basics], request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    sasl = ctx.session.sasl
    if sasl is None:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="SaslAuthenticate request received after successful "
                                                      "authentication", auth_bytes=b"")
    result = sasl.authenticate(bytes(request.auth_bytes))
    return SaslAuthenticateResponse(error_code=result.error_code, error_message=result.error_message,
                                    auth_bytes=result.auth_bytes, session_lifetime_ms=result.session_lifetime_ms)
