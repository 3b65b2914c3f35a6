"""DescribeDelegationToken (41) v1-3, as Kafka's handleDescribeTokensRequest: REQUEST_NOT_ALLOWED,
else AUTH_DISABLED without a secret key; an empty owner list: no tokens; null: every token. A token
is listed when it matches the owners asked for (as owner, requester or renewer) and the requester is
its owner, requester or a renewer, or may DESCRIBE the DELEGATION_TOKEN, or DESCRIBE_TOKENS on the
owner USER (DelegationTokenManager.filterToken). Tokens past their expiry are listed until swept."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed
from grete.broker.security.delegation_tokens import token_requests_allowed
from grete.coordinator.metadata import DelegationTokenInfo
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeDelegationTokenRequest, DescribeDelegationTokenResponse

Response = DescribeDelegationTokenResponse
Described = DescribeDelegationTokenResponse.DescribedDelegationToken
Renewer = DescribeDelegationTokenResponse.DescribedDelegationTokenRenewer


def _eligible(ctx: RequestContext[Admin], owners: list[str] | None, token: DelegationTokenInfo) -> bool:
    if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
        return False
    return (token.owner_or_renewer(ctx.principal)
            or allowed(ctx, Op.DESCRIBE, Res.DELEGATION_TOKEN, token.token_id)
            or allowed(ctx, Op.DESCRIBE_TOKENS, Res.USER, token.owner))


def _described(token: DelegationTokenInfo, hmac: bytes) -> Described:
    owner_type, _, owner_name = token.owner.partition(":")
    requester_type, _, requester_name = token.requester.partition(":")
    return Described(principal_type=owner_type, principal_name=owner_name,
                     token_requester_principal_type=requester_type, token_requester_principal_name=requester_name,
                     issue_timestamp=token.issue_ms, expiry_timestamp=token.expiry_ms, max_timestamp=token.max_ms,
                     token_id=token.token_id, hmac=hmac,
                     renewers=[Renewer(principal_type=r.partition(":")[0], principal_name=r.partition(":")[2])
                               for r in token.renewers])


@api(ApiKey.DESCRIBE_DELEGATION_TOKEN, 0, 3, advertised_min=1)
def handle(ctx: RequestContext[Admin], request: DescribeDelegationTokenRequest) -> Response:
    session = ctx.session
    if not token_requests_allowed(session.security_protocol, ctx.principal, session.token_authenticated):
        return Response(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, tokens=[])
    manager = ctx.broker.delegation_tokens
    if not manager.enabled:
        return Response(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, tokens=[])
    if request.owners is not None and not request.owners:
        return Response(error_code=ErrorCode.NONE, tokens=[])
    owners = None if request.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    return Response(error_code=ErrorCode.NONE, tokens=[
        _described(token, hmac) for token, hmac in manager.tokens() if _eligible(ctx, owners, token)])
