"""CreateDelegationToken, RenewDelegationToken and ExpireDelegationToken on a KRaft broker, as a
Kafka 4.3.1 broker carries them out: once the broker's own checks pass (the handlers'), forwarded to
the active controller in an Envelope with the caller's principal; the controller checks that caller
again, finds the token by its HMAC, and writes DelegationTokenRecord / RemoveDelegationTokenRecord.
Its answer is the client's, given once this broker's image shows the change, so that a
DescribeDelegationToken or a ``tokenauth`` login on this broker right after sees it.
DescribeDelegationToken stays the broker's own, from its image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from grete.broker.quorum.broker_store import BrokerMetadataStore
from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import Admin
from grete.coordinator.metadata import DelegationTokenInfo
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)

R = TypeVar("R", bound=Message)


def kraft_broker_store(ctx: RequestContext[Admin]) -> BrokerMetadataStore | None:
    """The store of a KRaft broker (``process.roles=broker``), which forwards token requests; else None."""
    store = ctx.broker.metadata
    return store if isinstance(store, BrokerMetadataStore) else None


async def _forward(ctx: RequestContext[Admin], store: BrokerMetadataStore, request: Message, answer: type[R]) -> R:
    session = ctx.session
    return await store.forward(request, answer, ctx.api_version, ctx.client_id, session.principal,
                               session.token_authenticated, session.client_host)


async def create(ctx: RequestContext[Admin], store: BrokerMetadataStore,
                 request: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    answer = await _forward(ctx, store, request, CreateDelegationTokenResponse)
    if answer.error_code == ErrorCode.NONE:
        await store.until(lambda: answer.token_id in store.delegation_tokens(), f"delegation token {answer.token_id}")
    return answer


async def renew(ctx: RequestContext[Admin], store: BrokerMetadataStore,
                request: RenewDelegationTokenRequest) -> RenewDelegationTokenResponse:
    known = ctx.broker.delegation_tokens.token_for_hmac(bytes(request.hmac))
    answer = await _forward(ctx, store, request, RenewDelegationTokenResponse)
    await _until_shown(store, known, answer.error_code, lambda t: t is None or t.expiry_ms == answer.expiry_timestamp_ms)
    return answer


async def expire(ctx: RequestContext[Admin], store: BrokerMetadataStore,
                 request: ExpireDelegationTokenRequest) -> ExpireDelegationTokenResponse:
    known = ctx.broker.delegation_tokens.token_for_hmac(bytes(request.hmac))
    answer = await _forward(ctx, store, request, ExpireDelegationTokenResponse)
    removed = request.expiry_time_period_ms < 0
    await _until_shown(store, known, answer.error_code,
                       lambda t: t is None or (not removed and t.expiry_ms == answer.expiry_timestamp_ms))
    return answer


async def _until_shown(store: BrokerMetadataStore, known: DelegationTokenInfo | None, error: int,
                       shown: Callable[[DelegationTokenInfo | None], bool]) -> None:
    """Until the image shows the token's change. A token this broker cannot find by its HMAC (its
    image behind, or no secret key here) is not waited for: the controller's answer stands."""
    if error == ErrorCode.NONE and known is not None:
        token_id = known.token_id
        await store.until(lambda: shown(store.delegation_tokens().get(token_id)), f"delegation token {token_id}")
