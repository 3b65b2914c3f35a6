"""The broker's event loop: stock asyncio, with an epoll selector that wakes on time for short timers.

epoll_wait takes its timeout in whole milliseconds, and the standard selector rounds up so as never
to wake early. A timer due in 0.2 ms therefore sleeps a full millisecond, and a Fetch long poll of
``fetch.wait.max.ms=1`` (which expires at a whole-millisecond tick, as in Kafka: see
``handlers/fetch.py`` ``expiry``) would be answered up to 1 ms late, every time, whenever the loop
has nothing else to do. For short waits this selector sleeps in ``select()`` on the epoll
descriptor itself (microsecond timeout; the descriptor turns readable when any registered event is
ready) and then collects the events without blocking: one extra system call per idle wake-up, and
only when a timer is due within ``FINE_BELOW_S``.
"""

from __future__ import annotations

import asyncio
import select
import selectors

FINE_BELOW_S = 0.05  # beyond this, a millisecond of rounding no longer matters to anyone waiting
FD_SETSIZE = 1024  # select() cannot watch a descriptor at or above this


class FineEpollSelector(selectors.EpollSelector):
    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and 0 < timeout < FINE_BELOW_S:
            fd = self.fileno()
            if fd < FD_SETSIZE:
                try:
                    select.select([fd], [], [], timeout)
                except InterruptedError:
                    pass
                timeout = 0
        return super().select(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop on :class:`FineEpollSelector` where epoll exists, else asyncio's default."""
    if not hasattr(selectors, "EpollSelector"):
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(FineEpollSelector())
