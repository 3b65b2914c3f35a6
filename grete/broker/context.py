"""What a handler knows about the request it is answering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grete.broker.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    listener: str = "PLAINTEXT"

    @property
    def version(self) -> int:
        return self.api_version


class CloseConnection(Exception):
    """Raised by a handler when Kafka would close the connection instead of answering
    (e.g. an acks=0 produce that failed: the client expects no response, so closing is the only
    signal it gets)."""
