"""A connection's ordering and pacing rules: responses leave in request order, reading pauses while
a reason to mute the connection holds, and a connection quiet for ``connections.max.idle.ms`` is closed.

Requests on a connection may be pipelined and handlers may finish out of order (a long-polled Fetch
behind a Metadata); each request takes a :class:`Slot` when it arrives and the queue releases
answers from the head only, as Kafka's one-in-flight-per-channel muting guarantees.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from grete.protocol.framing import FrameReader

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


class IdleTimer:
    """``connections.max.idle.ms``: ``expire`` is called once the connection has been quiet that
    long and ``busy()`` (answers still owed) is false. One timer per connection re-arms itself on
    expiry instead of on every read (re-arming on every read cost more than a whole cached empty Fetch)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_ms: int, busy: Callable[[], bool],
                 expire: Callable[[], None]) -> None:
        self._loop = loop
        self._idle_s = idle_ms / 1000
        self._busy = busy
        self._expire = expire
        self._handle: asyncio.TimerHandle | None = None
        self.last_active = 0.0

    def touch(self) -> None:
        self.last_active = self._loop.time()
        if self._idle_s > 0 and self._handle is None:
            self._handle = self._loop.call_at(self.last_active + self._idle_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        now = self._loop.time()
        if self._busy():  # still answering: not idle
            self.last_active = now
        deadline = self.last_active + self._idle_s
        if deadline > now:  # active since the timer was set: wait out the rest
            self._handle = self._loop.call_at(deadline, self._fire)
            return
        self._expire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Mute:
    """Why a connection reads no more requests, as Kafka mutes a channel: an answer it must send
    first (a request that holds the connection, a full queue), a full socket buffer, a quota's
    throttle (KIP-219), or queued.max.request.bytes used up. Reading resumes when no reason is left;
    frames read before the pause are then processed by ``process_frames``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reader: FrameReader, responses: ResponseQueue,
                 is_closed: Callable[[], bool], process_frames: Callable[[], None]) -> None:
        self._loop = loop
        self._reader = reader
        self._responses = responses
        self._is_closed = is_closed
        self._process_frames = process_frames
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.writing_paused = False
        self.waiting_for_memory = False
        self.throttled: asyncio.TimerHandle | None = None  # KIP-219: muted until this fires

    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self._is_closed():
            self.paused = True
            self.transport.pause_reading()

    def socket_full(self, full: bool) -> None:
        self.writing_paused = full
        if full:
            self.pause()
        else:
            self.maybe_resume()

    def throttle(self, throttle_ms: int) -> None:
        """KIP-219: the answer goes out now; nothing more is read from this client for
        ``throttle_ms`` (a later, longer throttle extends the pause)."""
        until = self._loop.time() + throttle_ms / 1000
        current = self.throttled
        if current is not None:
            if current.when() >= until:
                return
            current.cancel()
        self.throttled = self._loop.call_at(until, self._end_throttle)
        self.pause()

    def _end_throttle(self) -> None:
        self.throttled = None
        self.maybe_resume()

    def wait_for_memory(self) -> None:
        """A request's size is read and queued.max.request.bytes is used up: read no more until the
        pool, in turn, reserves this request's memory."""
        self.pause()
        if not self.waiting_for_memory:
            self.waiting_for_memory = True
            self._reader.when_memory_released(self._memory_released)

    def _memory_released(self) -> None:
        self.waiting_for_memory = False
        self.maybe_resume()

    def maybe_resume(self) -> None:
        if (self.paused and not self.writing_paused and not self._is_closed() and self.throttled is None
                and not self.waiting_for_memory and self._responses.drained and self.transport is not None):
            self.paused = False
            self.transport.resume_reading()
            if self._reader.pending:  # frames that arrived before the pause
                self._loop.call_soon(self._process_frames)

    def end(self) -> None:
        """The connection is gone: no timer or memory wait outlives it."""
        if self.waiting_for_memory:
            self.waiting_for_memory = False
            self._reader.forget_waiting()
        if self.throttled is not None:
            self.throttled.cancel()
