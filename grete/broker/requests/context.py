"""What a handler knows about the request it is answering, and about the connection it came on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grete.broker.broker import Broker
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


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    session: Session
    size: int = 0  # the request's bytes on the wire (the producer byte-rate quota counts them)
    throttle_ms: int = 0  # set by the quota step: the connection reads nothing more for that long

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


class CloseConnection(Exception):
    """Raised by a handler when Kafka would close the connection instead of answering
    (e.g. an acks=0 produce that failed: the client expects no response, so closing is the only
    signal it gets)."""
