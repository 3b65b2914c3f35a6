"""A connection's ordering and pacing rules, sans I/O: responses leave in request order, reading
pauses while too many wait, and a connection quiet for ``connections.max.idle.ms`` is closed.

Requests on a connection may be pipelined and handlers may finish out of order (a long-polled Fetch
behind a Metadata); each request takes a :class:`Slot` when it arrives and the queue releases
answers from the head only, as Kafka's one-in-flight-per-channel muting guarantees.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

MAX_PENDING_RESPONSES = 100  # stop reading while this many responses wait (backpressure)


class Slot:
    """A response's place in the order; ``parts`` is set when the answer is ready ([] for none).
    ``timing`` is the request's counters and clock readings, for the metrics (None: not timed)."""

    __slots__ = ("parts", "timing")

    def __init__(self) -> None:
        self.parts: list[Any] | None = None
        self.timing: Any = None


class ResponseQueue:
    __slots__ = ("_slots", "max_pending")

    def __init__(self, max_pending: int = MAX_PENDING_RESPONSES) -> None:
        self._slots: deque[Slot] = deque()
        self.max_pending = max_pending

    def reserve(self) -> Slot:
        slot = Slot()
        self._slots.append(slot)
        return slot

    def ready(self) -> Iterator[Slot]:
        """The answers at the head that are complete, in order, each removed as it is taken."""
        slots = self._slots
        while slots and slots[0].parts is not None:
            yield slots.popleft()

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def full(self) -> bool:
        return len(self._slots) >= self.max_pending

    @property
    def drained(self) -> bool:
        """Few enough waiting to read again (hysteresis: half the limit)."""
        return len(self._slots) < self.max_pending // 2


class IdleClock:
    """``connections.max.idle.ms``: when is the connection due to close, given when it was last
    active? One timer per connection re-arms itself on expiry instead of on every read (re-arming on
    every read cost more than a whole cached empty Fetch)."""

    __slots__ = ("idle_s", "last_active")

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = idle_ms / 1000
        self.last_active = 0.0

    @property
    def enabled(self) -> bool:
        return self.idle_s > 0

    def touch(self, now: float) -> None:
        self.last_active = now

    def deadline(self) -> float:
        return self.last_active + self.idle_s
