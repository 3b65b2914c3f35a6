"""Fetches parked on a partition (Kafka's DelayedFetch), by what can complete them: a consumer's
reads up to the high watermark or last stable offset, a follower's up to the log end. Each is a
future the partition completes when it changes: no polling.

A fetch of many partitions parks one future on all of them; the first to change completes it. Such
a fetch does not take its future back from each partition when it is answered (at its max wait, or
woken by another partition): a done future is skipped by a wake and dropped from the list once the
list has doubled since it was last swept, so parking costs an append per partition and nothing more."""

from __future__ import annotations

import asyncio

SWEEP_MIN = 16  # a list this short is never swept


class ParkedFetches:
    __slots__ = ("consumers", "replicas", "_sweep_at")

    def __init__(self) -> None:
        self.consumers: list[asyncio.Future[None]] = []
        self.replicas: list[asyncio.Future[None]] = []
        self._sweep_at = SWEEP_MIN

    def park(self, replica: bool, future: asyncio.Future[None] | None = None) -> asyncio.Future[None]:
        """Park ``future`` (a new one if None) until this partition has news for the fetch."""
        if future is None:
            future = asyncio.get_running_loop().create_future()
        waiters = self.replicas if replica else self.consumers
        waiters.append(future)
        if len(waiters) >= self._sweep_at:
            waiters[:] = [f for f in waiters if not f.done()]
            self._sweep_at = max(SWEEP_MIN, 2 * len(waiters))
        return future

    def discard(self, future: asyncio.Future[None]) -> None:
        for waiters in (self.consumers, self.replicas):
            try:
                waiters.remove(future)
                return
            except ValueError:
                pass

    def wake_consumers(self) -> None:
        waiters, self.consumers = self.consumers, []
        _complete(waiters)

    def wake_replicas(self) -> None:
        waiters, self.replicas = self.replicas, []
        _complete(waiters)

    def wake_all(self) -> None:
        waiters, replica_waiters = self.consumers, self.replicas
        self.consumers, self.replicas = [], []
        _complete(waiters)
        _complete(replica_waiters)


def _complete(waiters: list[asyncio.Future[None]]) -> None:
    for future in waiters:
        if not future.done():
            future.set_result(None)
