"""ExpireDelegationToken (40) v1-2, as Kafka 4.3: by the owner or a renewer; a negative period
removes the token at once (the answer's expiry is now), otherwise the expiry becomes now + period,
capped by the max lifetime. Errors: REQUEST_NOT_ALLOWED (expiry -1), then AUTH_DISABLED, NOT_FOUND,
OWNER_MISMATCH, EXPIRED (expiry 0). A KRaft broker forwards it, once allowed, to the controller
(grete/broker/quorum/forwarded_tokens.py)."""

from __future__ import annotations

from grete.broker.quorum import forwarded_tokens
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.delegation_tokens import token_requests_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse

Response = ExpireDelegationTokenResponse


@api(ApiKey.EXPIRE_DELEGATION_TOKEN, 0, 2, advertised_min=1)
async def handle(ctx: RequestContext[Admin], request: ExpireDelegationTokenRequest) -> Response:
    session = ctx.session
    if not token_requests_allowed(session.security_protocol, ctx.principal, session.token_authenticated,
                                  session.forwarded):
        return Response(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=-1)
    store = forwarded_tokens.kraft_broker_store(ctx)
    try:
        if store is not None:
            return await forwarded_tokens.expire(ctx, store, request)
        error, expiry = await ctx.broker.delegation_tokens.expire(ctx.principal, bytes(request.hmac),
                                                                  request.expiry_time_period_ms)
    except KafkaError as exc:
        error, expiry = exc.code, 0
    return Response(error_code=error, expiry_timestamp_ms=expiry)
