"""A connection's memo of its last empty Fetch answer: an idle consumer asks the same Fetch again and
again (librdkafka rotating the order of its partitions), and while what the answer was read from
still holds (the Fetch handler's snapshot, behind :class:`AnswerSnapshot`) the repeat is answered
from these bytes, its own correlation id spliced in, with no decode, read or encode."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import DataPlane

_SIZE_AND_ID = struct.Struct(">ii")


class AnswerSnapshot(Protocol):
    """The hook an empty answer leaves for its repeats (the Fetch handler's ``Snapshot``): whether the
    state it was read from still holds, a way to park until it changes, and the handler's own rules
    for going on after a change. The connection knows no handler; it only calls these."""

    def unchanged(self) -> bool: ...
    def parked(self) -> bool: ...
    def reordered(self, first: bytes, repeat: bytes) -> bytes | None: ...
    def wait(self, max_wait_ms: int, done: Callable[[bool, float], None]) -> None: ...
    def release(self) -> None: ...
    def resume(self, ctx: RequestContext[DataPlane], request: Any, deadline: float) -> Any: ...


MemoKey = tuple[bytes, Any, str | None]
# The orders of one request remembered (librdkafka's: one per partition it fetches), in bytes of
# request and answer; past this they start over.
MAX_REORDER_BYTES = 256 * 1024


class FetchMemo:
    """The last Fetch with nothing to read: its frame, decoded request, the state it was answered
    from and the answer's bytes after the correlation id."""

    __slots__ = ("head", "tail", "request", "snapshot", "body", "version", "client_id", "reorders",
                 "reorder_bytes", "acls")

    def __init__(self, frame: bytes, request: Any, snapshot: AnswerSnapshot, encoded: bytes,
                 version: int, client_id: str | None, acls: int) -> None:
        self.head = frame[:4]        # api key + version
        self.tail = frame[8:]        # client id onwards
        self.request = request
        self.snapshot = snapshot
        self.body = encoded[8:]      # response header tagged fields + body
        self.version = version
        self.client_id = client_id
        self.reorders: dict[bytes, bytes] = {}  # the answer to this request in other orders, by frame tail
        self.reorder_bytes = 0
        self.acls = acls  # the authorizer's generation it was answered under

    def body_for(self, frame: bytes) -> bytes | None:
        """The answer's body for ``frame`` if it asks what this request asked (librdkafka rotates
        the order of partitions from one Fetch to the next); None: not a repeat."""
        if frame[:4] != self.head:
            return None
        tail = frame[8:]
        if tail == self.tail:
            return self.body
        body = self.reorders.get(tail)
        if body is None:
            body = self.snapshot.reordered(self.head + frame[4:8] + self.tail, frame)
            if body is None:
                return None
            if self.reorder_bytes >= MAX_REORDER_BYTES:
                self.reorders.clear()
                self.reorder_bytes = 0
            self.reorders[tail] = body
            self.reorder_bytes += len(tail) + len(body)
        return body

    def answer(self, correlation_id: int, body: bytes) -> bytes:
        return _SIZE_AND_ID.pack(len(body) + 4, correlation_id) + body
