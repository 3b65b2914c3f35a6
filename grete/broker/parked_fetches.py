"""Fetches parked on a partition (Kafka's DelayedFetch), by what can complete them: a consumer's
reads up to the high watermark or last stable offset, a follower's up to the log end. Each is a
future the partition completes when it changes: no polling."""

from __future__ import annotations

import asyncio


class ParkedFetches:
    __slots__ = ("consumers", "replicas")

    def __init__(self) -> None:
        self.consumers: list[asyncio.Future[None]] = []
        self.replicas: list[asyncio.Future[None]] = []

    def park(self, replica: bool) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self.replicas if replica else self.consumers).append(future)
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
