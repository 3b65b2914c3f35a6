"""The broker's loop must wake on time for sub-millisecond timers (eventloop.py), and a Fetch wait
must expire at a whole-millisecond tick, as Kafka's purgatory does (fetch.py ``expiry``)."""

from __future__ import annotations

import asyncio
import selectors
import socket
import time

import pytest

from grete.broker.handlers.fetch import expiry
from grete.broker.network.eventloop import FineEpollSelector, new_event_loop

pytestmark = pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="epoll only")


def _fastest_wait(selector: selectors.BaseSelector, timeout: float, tries: int = 20) -> float:
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        assert selector.select(timeout) == []
        best = min(best, time.perf_counter() - started)
    return best


def test_short_timeout_is_not_rounded_up_to_a_millisecond() -> None:
    # The stock selector's epoll_wait sleeps at least 1 ms for any positive timeout (it rounds up);
    # the fine one must come back from a 0.2 ms timeout in under 1 ms at least once in 20 tries.
    with selectors.EpollSelector() as stock:
        assert _fastest_wait(stock, 0.0002) >= 0.001
    with FineEpollSelector() as fine:
        assert _fastest_wait(fine, 0.0002) < 0.001


def test_ready_events_are_reported_by_a_short_wait() -> None:
    a, b = socket.socketpair()
    with a, b, FineEpollSelector() as selector:
        selector.register(a, selectors.EVENT_READ, "a")
        assert selector.select(0.0005) == []
        b.send(b"x")
        ready = selector.select(0.0005)
        assert [(key.data, events) for key, events in ready] == [("a", selectors.EVENT_READ)]
        # longer timeouts take the stock path and see the same event
        assert [key.data for key, _ in selector.select(1.0)] == ["a"]


def test_expiry_rounds_the_deadline_down_to_a_whole_millisecond() -> None:
    loop = new_event_loop()

    async def deadlines() -> list[tuple[float, float, float]]:
        out = []
        for wait_ms in (1, 2, 500):
            now = loop.time()
            out.append((wait_ms / 1000, now, expiry(wait_ms)))
            await asyncio.sleep(0.0003)  # land on different fractions of a millisecond
        return out

    try:
        for wait, now, deadline in loop.run_until_complete(deadlines()):
            assert deadline * 1000 == pytest.approx(round(deadline * 1000), abs=1e-6)  # a whole ms
            assert now + wait - 0.001 < deadline <= now + wait + 1e-4  # expiry read the clock a bit later
    finally:
        loop.close()
