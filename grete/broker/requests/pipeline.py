"""The steps around every handler, in Kafka's order: authentication gate, the feature gate (an API
whose feature is finalized off), authorization, the handler, quota (throttle time), metrics; fault
injection for grete.testing wraps the handler.

A handler that raises gets Kafka's answer to an unexpected exception: the request's own error
response with UNKNOWN_SERVER_ERROR (no message: Kafka leaks nothing of the exception), the traceback
logged once, and the connection kept; an acks=0 produce, which has no answer, closes it instead.

Each step is a small function of the request context. Most pass through today: the security
listeners, the authorizer and quotas plug in here (``Pipeline`` takes them), and ``throttle_time_ms``
is written into responses in this one place, never by a handler; the connection then mutes itself
for ``ctx.throttle_ms`` (KIP-219).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, Protocol

from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.requests.context import CloseConnection, Later, RequestContext
from grete.broker.requests.features import GATES
from grete.broker.requests.services import Everything
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import APIS, ApiKey
from grete.protocol.shapes import error_response

log = logging.getLogger(__name__)

COUNTED_BY_HANDLER = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})
# Cluster actions (inter-broker requests) and the SASL exchange: never throttled, as in Kafka.
EXEMPT_APIS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                         ApiKey.CONTROLLED_SHUTDOWN, ApiKey.SASL_HANDSHAKE, ApiKey.WRITE_TXN_MARKERS,
                         ApiKey.SASL_AUTHENTICATE, ApiKey.ALTER_PARTITION})
# What an unauthenticated session may send (Kafka's SaslServerAuthenticator state machine).
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class HandlerShape(Protocol):
    """A registered handler as the pipeline runs it (``registry.Handler``; a protocol here so that the
    broker's state, which owns the pipeline, does not depend on the registry)."""

    @property
    def name(self) -> str: ...
    @property
    def fn(self) -> Callable[[RequestContext[Everything], Any], Any]: ...


class NotAuthenticated(Exception):
    """The request came before authentication finished: Kafka closes the connection."""


class Quotas(Protocol):
    """The quota step (``grete.broker.quotas.client_quotas.ClientQuotas``)."""

    active: bool

    def throttle(self, ctx: RequestContext[Everything], request: Any, response: Any,
                 handler_s: float) -> tuple[int, Any]: ...


# The authorization step: None to run the handler, or the whole answer when the request is refused
# outright (most APIs check per resource inside their handler, through ``ctx.broker.authorizer``).
Authorize = Callable[[RequestContext[Everything], Any], Message | None]


def allow_all(ctx: RequestContext[Everything], request: Any) -> Message | None:
    return None


def illegal_sasl_state(ctx: RequestContext[Everything], request: Any) -> Message:
    info = APIS[ctx.api_key]
    kafka_name = re.sub(r"(?<!^)(?=[A-Z])", "_", info.name).upper()  # Kafka's ApiKeys name
    return error_response(info.response, request, ctx.api_version, ErrorCode.ILLEGAL_SASL_STATE,
                          f"Unexpected Kafka request of type {kafka_name} during SASL authentication.")


def unsupported(ctx: RequestContext[Everything], request: Any) -> Message:
    return error_response(APIS[ctx.api_key].response, request, ctx.api_version, ErrorCode.UNSUPPORTED_VERSION, None)


class Pipeline:
    def __init__(self, metrics: BrokerMetrics, *, quotas: Quotas | None = None,
                 authorize: Authorize | None = None) -> None:
        self.quotas = quotas
        self.authorize = authorize  # None: no authorizer (authorizer.class.name unset)
        self.metrics = metrics

    def run(self, conn: Any, ctx: RequestContext[Everything], handler: HandlerShape, request: Any) -> Any:
        """The handler's result (a response, a coroutine or future of one, a :class:`Later`, or None
        for no answer), after the gate and with the throttle applied to whatever it answers."""
        session = ctx.session
        if not session.authenticated or session.expires_at is not None:
            # A SASL connection authenticating, or a session with a lifetime (KIP-368).
            sasl = session.sasl
            if sasl is not None:
                if not sasl.admits(ctx.api_key):
                    if sasl.answers_illegal_state():
                        # Kafka's SaslServerAuthenticator mid-exchange: the request's own error
                        # answer, ILLEGAL_SASL_STATE, then the connection closed.
                        session.close_after_response = True
                        return illegal_sasl_state(ctx, request)
                    raise NotAuthenticated(f"unexpected {handler.name} request (SASL state: {sasl.state.value}, "
                                           f"expired: {session.authenticated})")
            elif ctx.api_key not in BEFORE_AUTHENTICATION:
                raise NotAuthenticated(f"{handler.name} before authentication")
        if ctx.api_key in GATES and ctx.broker.features.refuses(ctx.api_key):
            # The feature behind the API is finalized off (KafkaApis checks this before authorizing).
            return self._finish(ctx, request, unsupported(ctx, request))
        if self.authorize is not None:
            denied = self.authorize(ctx, request)
            if denied is not None:
                return self._finish(ctx, request, denied)
        faults = ctx.broker.faults
        # Fault-injection seam for grete.testing: None unless a test injects faults, so production
        # pays one attribute read. When set, it runs the handler itself and may answer with an
        # injected error, defer the request, or raise CloseConnection.
        quotas = self.quotas if self.quotas is not None and self.quotas.active else None
        started = perf_counter() if quotas is not None else 0.0
        try:
            result = handler.fn(ctx, request) if faults is None else faults.handle(conn, handler, ctx, request)
        except CloseConnection:
            raise
        except Exception:
            return self._failed(ctx, handler, request)
        # Kafka's request quota counts the time a request holds a handler thread: here, the
        # handler's synchronous part (a parked Fetch or acks=all wait holds nothing).
        handler_s = perf_counter() - started if quotas is not None else 0.0
        if result is None:
            if quotas is not None and ctx.api_key not in EXEMPT_APIS:
                # An acks=0 produce has no answer to carry the throttle: the channel is still muted.
                ctx.throttle_ms = quotas.throttle(ctx, request, None, handler_s)[0]
            return None
        if isinstance(result, Message):  # answered now (a plain class check: cheaper than iscoroutine)
            return self._finish(ctx, request, result, handler_s)
        if isinstance(result, Later):
            return self._then(ctx, handler, request, result, handler_s)
        return self._later(ctx, handler, request, result, handler_s)

    def _then(self, ctx: RequestContext[Everything], handler: HandlerShape, request: Any, pending: Later,
              handler_s: float) -> Later:
        """``_later`` for a handler's :class:`Later`: the same steps, run when it settles."""
        answer = Later()

        def settled(response: Any, error: BaseException | None) -> None:
            try:
                if error is not None:
                    if isinstance(error, CloseConnection) or not isinstance(error, Exception):
                        answer.settle(None, error)
                        return
                    try:
                        raise error
                    except Exception:  # logged with its traceback, as _later logs it
                        response = self._failed(ctx, handler, request)
                elif response is not None:
                    response = self._finish(ctx, request, response, handler_s)
            except Exception as exc:  # CloseConnection, or a failure of the steps themselves
                answer.settle(None, exc)
                return
            answer.settle(response)

        pending.then(settled)
        return answer

    async def _later(self, ctx: RequestContext[Everything], handler: HandlerShape, request: Any, pending: Awaitable[Any],
                     handler_s: float) -> Any:
        try:
            response = await pending
        except CloseConnection:
            raise
        except Exception:
            return self._failed(ctx, handler, request)
        return None if response is None else self._finish(ctx, request, response, handler_s)

    def _failed(self, ctx: RequestContext[Everything], handler: HandlerShape, request: Any) -> Message:
        """Kafka's RequestHandlerHelper.handleError: log the exception, answer UNKNOWN_SERVER_ERROR."""
        log.exception("Unexpected error handling %s v%d request (correlation id %d) from client %r at %s",
                      handler.name, ctx.api_version, ctx.correlation_id, ctx.client_id, ctx.session.client_host)
        if ctx.api_key == ApiKey.PRODUCE and request.acks == 0:
            raise CloseConnection(f"{handler.name} with acks=0 failed") from None
        response = error_response(APIS[ctx.api_key].response, request, ctx.api_version,
                                  ErrorCode.UNKNOWN_SERVER_ERROR, None)
        if ctx.api_key in COUNTED_BY_HANDLER:  # which counted nothing: it did not get to its answer
            errors, code = self.metrics.api(ctx.api_key).errors, int(ErrorCode.UNKNOWN_SERVER_ERROR)
            errors[code] = errors.get(code, 0) + 1
        return self._finish(ctx, request, response)  # type: ignore[no-any-return]

    def _finish(self, ctx: RequestContext[Everything], request: Any, response: Any, handler_s: float = 0.0) -> Any:
        quotas = self.quotas
        if quotas is not None and quotas.active and ctx.api_key not in EXEMPT_APIS:
            throttle, response = quotas.throttle(ctx, request, response, handler_s)
            if throttle:
                # The largest throttle wins (a handler may have set one: partition mutations).
                ctx.throttle_ms = max(ctx.throttle_ms, throttle)
                if hasattr(response, "throttle_time_ms"):
                    response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
        if ctx.api_key not in COUNTED_BY_HANDLER:
            # Kafka's ErrorsPerSec: the answer's error (NONE included). Produce and Fetch count the
            # error of every partition themselves, where they build the answer.
            errors = self.metrics.api(ctx.api_key).errors
            code = getattr(response, "error_code", 0) or 0
            errors[code] = errors.get(code, 0) + 1
        return response
