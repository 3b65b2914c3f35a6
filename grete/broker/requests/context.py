"""What a handler knows about the request it is answering, about the connection it came on, and (its
room's view of) the node answering it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from grete.broker.security.sasl import SaslAuthenticator

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    """The connection's identity, as Kafka's RequestContext carries it: the listener and its
    security protocol, the authenticated principal (ANONYMOUS on PLAINTEXT), the peer's address, and
    the client software it named in ApiVersions v3+ (KIP-511). On a SASL listener, ``sasl`` is the
    connection's authentication state; ``expires_at`` (monotonic seconds) the end of a session with
    a lifetime (KIP-368), and ``close_after_response`` asks the connection to close once the current
    answer is written (a failed authentication)."""

    listener: str
    security_protocol: str
    client_host: str
    principal: str = ANONYMOUS
    authenticated: bool = True
    token_authenticated: bool = False  # SCRAM with a delegation token (KafkaPrincipal.tokenAuthenticated)
    forwarded: bool = False  # carried in a KRaft broker's Envelope (Kafka's RequestChannel.Request.isForwarded)
    client_software_name: str | None = None
    client_software_version: str | None = None
    sasl: SaslAuthenticator | None = None
    expires_at: float | None = None
    close_after_response: bool = False


# The part of the node a handler sees: one of grete.broker.requests.services' views (the node itself
# has them all).
View = TypeVar("View", covariant=True)


@dataclass(slots=True)
class RequestContext(Generic[View]):
    broker: View
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    session: Session
    size: int = 0  # the request's bytes on the wire (the producer byte-rate quota counts them)
    throttle_ms: int = 0  # set by the quota step: the connection reads nothing more for that long
    # Set by a Produce that waits before it appends (transaction verification): the connection reads
    # nothing more until it is answered, so the producer's next batches cannot be appended first.
    holds_connection: bool = False

    @property
    def version(self) -> int:
        return self.api_version

    @property
    def client_host(self) -> str:
        return self.session.client_host

    @property
    def listener(self) -> str:
        return self.session.listener

    @property
    def principal(self) -> str:
        return self.session.principal


Settled = Callable[[Any, BaseException | None], None]


class Later:
    """An answer a handler gives later, settled by a callback of its own (a timer, a partition's
    wake) with no task between: the one waiting for it (the pipeline, and the connection through
    the pipeline's own Later) registers a callback with :meth:`then`, called directly, in the same
    loop step, with (answer, None) or (None, exception). Awaitable too, for those that await a
    handler's result (fault injection, Envelope)."""

    __slots__ = ("_callback", "_outcome")

    def __init__(self) -> None:
        self._callback: Settled | None = None
        self._outcome: tuple[Any, BaseException | None] | None = None

    @property
    def settled(self) -> bool:
        return self._outcome is not None

    def then(self, callback: Settled) -> None:
        """Call ``callback`` once settled (now, if it is)."""
        if self._outcome is not None:
            callback(*self._outcome)
        else:
            self._callback = callback

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        """The answer (``value``) or the exception the handler ended with; only the first counts."""
        if self._outcome is not None:
            return
        self._outcome = (value, error)
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(value, error)

    def __await__(self) -> Generator[Any, None, Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def copy(value: Any, error: BaseException | None) -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        self.then(copy)
        return future.__await__()


class CloseConnection(Exception):
    """Raised by a handler when Kafka would close the connection instead of answering
    (e.g. an acks=0 produce that failed: the client expects no response, so closing is the only
    signal it gets)."""
