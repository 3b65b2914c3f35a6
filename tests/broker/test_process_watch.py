"""The controller's watch on a broker's process (fast failover) ends when it is closed, whenever the
close lands: a node stopping must not wait for ever on a watch that swallowed its cancellation."""

from __future__ import annotations

import asyncio

from grete.broker.cluster.liveness import ProcessWatch
from grete.testing.common import free_port


def test_a_closed_watch_ends_whatever_it_was_doing() -> None:
    async def close_after(steps: int, port: int) -> bool:
        watch = ProcessWatch("127.0.0.1", port, lambda: None, lambda: None)
        for _ in range(steps):  # the watch connects, is refused, looks again...
            await asyncio.sleep(0)
        watch.close()
        await asyncio.sleep(0.1)
        return watch._task.done()

    async def every_moment() -> list[int]:
        port = free_port()  # nothing listens there: every connect is refused
        return [steps for steps in range(12) if not await close_after(steps, port)]

    assert asyncio.run(every_moment()) == []  # else: still running after a close at these moments
