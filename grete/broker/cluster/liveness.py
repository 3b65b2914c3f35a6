"""Telling a dead broker process from a silent one, without waiting for its ZooKeeper session.

A process that dies (a crash, SIGKILL, an OOM kill) leaves evidence at once: the kernel closes its
sockets, so an open connection to it ends, and its port refuses new connections. A paused process,
a dead host or a cut network leave none of it: their connections hang, and only the session timeout
(``zookeeper.session.timeout.ms``) can tell. So a watch holds one idle TCP connection to the broker's
inter-broker listener and, when that connection ends, asks the port again: refused twice (the
second time a moment later) means nothing listens there any more. A broker registers only once its
listeners are bound (node.py), so a registered broker whose port refuses is not starting up.

The watch is evidence, not a verdict: the controller fences the broker's registration epoch, and
lifts the fence if the port answers again while the same registration stands. Nothing is ever
fenced on a timeout here; a watch that cannot connect for any other reason just tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

CONFIRM_S = 0.1  # between the two refusals that make the evidence
RETRY_S = 1.0  # between attempts while the port neither refuses nor accepts, or once it refused
CONNECT_TIMEOUT_S = 5.0


class ProcessWatch:
    """Watches the process behind ``host:port``: ``on_dead()`` when its port refuses connections
    after a connection ended (or from the start), then ``on_alive()`` if it accepts again."""

    def __init__(self, host: str, port: int, on_dead: Callable[[], None], on_alive: Callable[[], None]) -> None:
        self.host = host
        self.port = port
        self._on_dead = on_dead
        self._on_alive = on_alive
        self.dead = False
        self._task = asyncio.ensure_future(self._run())

    def close(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        while True:
            try:
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the watch must outlive anything unexpected; it is evidence only
                log.exception("watching %s:%d failed", self.host, self.port)
                await asyncio.sleep(RETRY_S)

    async def _watch_once(self) -> None:
        """One connection's life: connect, wait for it to end, then see whether the port refuses."""
        connected = await self._connect()
        if connected is None:
            await self._refused()
            return
        reader, writer = connected
        if self.dead:
            self.dead = False
            self._on_alive()
        try:
            while await reader.read(4096):
                pass  # nothing is asked on this connection; a peer that talks is still alive
        except OSError:
            pass  # reset: the same evidence as an orderly close
        finally:
            writer.transport.abort()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The open connection, or None if the port refused it. Other failures (a timeout, no
        route) say nothing about the process: wait and try again."""
        while True:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    return await asyncio.open_connection(self.host, self.port)
            except ConnectionRefusedError:
                return None
            except (TimeoutError, OSError):
                await asyncio.sleep(RETRY_S)

    async def _refused(self) -> None:
        if self.dead:
            await asyncio.sleep(RETRY_S)  # known dead: look again now and then, in case it is back
            return
        await asyncio.sleep(CONFIRM_S)
        again = await self._connect()
        if again is not None:
            again[1].transport.abort()
            return  # a listener back already, or a blip: the next round watches a new connection
        self.dead = True
        log.info("%s:%d refuses connections after its connection ended: the process is gone",
                 self.host, self.port)
        self._on_dead()
