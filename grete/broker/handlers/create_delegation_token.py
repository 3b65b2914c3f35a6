"""CreateDelegationToken (38) v1-3, as Kafka 4.3: refused over PLAINTEXT, one-way SSL and
token-authenticated connections (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED); a token for another owner
(v3's OwnerPrincipal) needs CREATE_TOKENS on that USER (else DELEGATION_TOKEN_AUTHORIZATION_FAILED);
renewers must be User principals (INVALID_PRINCIPAL_TYPE); without a secret key,
DELEGATION_TOKEN_AUTH_DISABLED. The error answers carry the owner and requester and nothing else.
A KRaft broker checks as much, then forwards it to the controller, which checks the caller the
Envelope names again and answers the rest (grete/broker/quorum/forwarded_tokens.py)."""

from __future__ import annotations

from grete.broker.quorum import forwarded_tokens
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed
from grete.broker.security.delegation_tokens import token_requests_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse

Response = CreateDelegationTokenResponse


def _answer(owner: str, requester: str, error: int, *, issue: int = -1, expiry: int = -1, max_ms: int = -1,
            token_id: str = "", hmac: bytes = b"") -> Response:
    owner_type, _, owner_name = owner.partition(":")
    requester_type, _, requester_name = requester.partition(":")
    return Response(error_code=error, principal_type=owner_type, principal_name=owner_name,
                    token_requester_principal_type=requester_type, token_requester_principal_name=requester_name,
                    issue_timestamp_ms=issue, expiry_timestamp_ms=expiry, max_timestamp_ms=max_ms,
                    token_id=token_id, hmac=hmac)


@api(ApiKey.CREATE_DELEGATION_TOKEN, 0, 3, advertised_min=1)
async def handle(ctx: RequestContext[Admin], request: CreateDelegationTokenRequest) -> Response:
    requester = ctx.principal
    owner = (f"{request.owner_principal_type}:{request.owner_principal_name}"
             if request.owner_principal_name else requester)
    session = ctx.session
    if not token_requests_allowed(session.security_protocol, requester, session.token_authenticated,
                                  session.forwarded):
        return _answer(owner, requester, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if owner != requester and not allowed(ctx, Op.CREATE_TOKENS, Res.USER, owner):
        return _answer(owner, requester, ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    if any(r.principal_type != "User" for r in request.renewers):
        return _answer(owner, requester, ErrorCode.INVALID_PRINCIPAL_TYPE)
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in request.renewers]
    store = forwarded_tokens.kraft_broker_store(ctx)
    try:
        if store is not None:
            return await forwarded_tokens.create(ctx, store, request)
        created = await ctx.broker.delegation_tokens.create(owner, requester, renewers, request.max_lifetime_ms)
    except KafkaError as exc:
        return _answer(owner, requester, exc.code, issue=0, expiry=0, max_ms=0)
    token = created.token
    if token is None:  # what Kafka 4.3's controller answers: the times left at 0
        return _answer(owner, requester, created.error, issue=0, expiry=0, max_ms=0)
    return _answer(owner, requester, ErrorCode.NONE, issue=token.issue_ms, expiry=token.expiry_ms,
                   max_ms=token.max_ms, token_id=token.token_id, hmac=created.hmac)
