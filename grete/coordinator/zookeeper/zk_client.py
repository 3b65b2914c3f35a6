"""ZooKeeper from the event loop: kazoo's blocking calls run on one worker thread, never on the loop.

One thread keeps the calls in the order they were made (Kafka's ZooKeeperClient pipelines them, in
order, on one session). Watches and session-state changes arrive on kazoo's own thread and are
handed to the loop with ``call_soon_threadsafe``: every callback a caller registers runs on the
loop, so the state it touches keeps one owner.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

log = logging.getLogger(__name__)

T = TypeVar("T")
CLOSE_TIMEOUT_S = 10.0

__all__ = ["BadVersionError", "MultiOpError", "NodeExistsError", "NoNodeError", "NotEmptyError", "Op", "ZkClient",
           "ZkUnavailable", "ZnodeStat", "ZookeeperError", "SessionState"]


class ZkUnavailable(Exception):
    """ZooKeeper could not be reached within ``zookeeper.connection.timeout.ms``."""


class MultiOpError(Exception):
    """A multi failed at operation ``index`` with ``error`` (BadVersionError, NodeExistsError...);
    nothing was applied."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(f"operation {index} failed: {type(error).__name__}")
        self.index = index
        self.error = error


class SessionState:
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost; the session (and our ephemerals) may survive
    LOST = "LOST"  # the session expired: ephemerals are gone, watches must be set again


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a multi (ZooKeeper's transaction): all or nothing."""

    kind: str  # "create", "set", "check", "delete"
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False
    sequence: bool = False


class ZkClient:
    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int) -> None:
        self.connect = connect
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._kazoo = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zookeeper")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_listeners: list[Callable[[str], None]] = []
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._kazoo.add_listener(self._on_kazoo_state)
        try:
            await self._run(self._kazoo.start, self._connection_timeout_s)
        except KazooTimeoutError:
            await self._run(self._kazoo.stop)
            raise ZkUnavailable(f"could not connect to ZooKeeper at {self.connect} within "
                                f"{self._connection_timeout_s:g} s (zookeeper.connection.timeout.ms)") from None

    async def close(self) -> None:
        """End the session: our ephemeral znodes vanish at once (a clean leave, not an expiry)."""
        if self._closed:
            return
        self._closed = True
        # Not on the worker thread: a call stuck there (ZooKeeper unreachable) must not hold up a
        # broker's shutdown; kazoo's stop is safe from any thread. Bounded: past it, the process
        # exits and ZooKeeper expires the session instead.
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, self._kazoo.stop), CLOSE_TIMEOUT_S)
            await asyncio.wait_for(loop.run_in_executor(None, self._kazoo.close), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("closing the ZooKeeper session took over %g s; leaving it to expire", CLOSE_TIMEOUT_S)
        finally:
            self._executor.shutdown(wait=False)

    def on_state(self, listener: Callable[[str], None]) -> None:
        """``listener(SessionState.*)`` on the loop whenever the session changes state."""
        self._state_listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's thread: never block here, hand it to the loop.
        names = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED,
                 KazooState.LOST: SessionState.LOST}
        name = names.get(state)
        if name is not None and self._loop is not None and not self._closed:
            self._loop.call_soon_threadsafe(self._dispatch_state, name)

    def _dispatch_state(self, state: str) -> None:
        for listener in list(self._state_listeners):
            listener(state)

    @property
    def session_id(self) -> int:
        client_id = self._kazoo.client_id
        return int(client_id[0]) if client_id else 0

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _to_loop(self, callback: Callable[..., None]) -> Callable[..., None]:
        loop = self._loop
        assert loop is not None, "start() first"

        def deliver(*args: Any) -> None:
            if not self._closed and not loop.is_closed():
                loop.call_soon_threadsafe(callback, *args)
        return deliver

    # --- reads -------------------------------------------------------------------------------
    async def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None when the znode does not exist."""
        try:
            data, stat = await self._run(self._kazoo.get, path)
        except NoNodeError:
            return None
        return (data or b""), stat

    async def exists(self, path: str) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self._run(self._kazoo.exists, path)
        return stat

    async def children(self, path: str) -> list[str]:
        try:
            found: list[str] = await self._run(self._kazoo.get_children, path)
        except NoNodeError:
            return []
        return sorted(found)

    # --- writes ------------------------------------------------------------------------------
    async def create(self, path: str, data: bytes | None = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        if makepath:
            await self.ensure_path(path.rsplit("/", 1)[0])
        created: str = await self._run(self._kazoo.create, path, data, ephemeral=ephemeral, sequence=sequence)
        return created

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents where missing, holding null data as Kafka's container
        znodes do (kazoo's own ensure_path writes empty bytes)."""
        def run() -> None:
            prefix = ""
            for part in path.strip("/").split("/"):
                prefix += "/" + part
                if self._kazoo.exists(prefix) is None:
                    try:
                        self._kazoo.create(prefix, None)
                    except NodeExistsError:
                        pass
        if path.strip("/"):
            await self._run(run)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        stat: ZnodeStat = await self._run(self._kazoo.set, path, data, version)
        return stat

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        try:
            await self._run(self._kazoo.delete, path, version, recursive)
        except NoNodeError:
            pass

    async def multi(self, ops: list[Op]) -> list[Any]:
        """Run ``ops`` atomically; the results in order. On failure raises MultiOpError naming the
        operation that failed and its error, nothing having been applied."""
        def run() -> list[Any]:
            txn = self._kazoo.transaction()
            for op in ops:
                if op.kind == "create":
                    txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif op.kind == "set":
                    txn.set_data(op.path, op.data, op.version)
                elif op.kind == "check":
                    txn.check(op.path, op.version)
                elif op.kind == "delete":
                    txn.delete(op.path, op.version)
                else:
                    raise ValueError(op.kind)
            results: list[Any] = txn.commit()
            return results
        results = await self._run(run)
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
                raise MultiOpError(index, result)
        for index, result in enumerate(results):
            if isinstance(result, Exception):
                raise MultiOpError(index, result)
        return results

    # --- watches -------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """``callback(children)`` on the loop now and on every change, for as long as the session
        lives (kazoo re-arms the watch); the path must exist."""
        deliver = self._to_loop(callback)

        def changed(children: list[str]) -> bool:
            deliver(sorted(children))
            return not self._closed
        self._kazoo.ChildrenWatch(path, changed)

    def watch_data(self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], None]) -> None:
        """``callback(data, stat)`` on the loop now and on every change; (None, None) while the
        znode does not exist."""
        deliver = self._to_loop(callback)

        def changed(data: bytes | None, stat: ZnodeStat | None) -> bool:
            deliver(data, stat)
            return not self._closed
        self._kazoo.DataWatch(path, changed)

    async def wait_deleted(self, path: str) -> None:
        """Until the znode does not exist: parked on a watch of it, which ends with the wait."""
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def resolve() -> None:
            if not gone.done():
                gone.set_result(None)
        deliver = self._to_loop(resolve)
        waiting = [True]  # read on kazoo's thread: a cancelled wait drops the watch at its next event

        def changed(_data: bytes | None, stat: ZnodeStat | None) -> bool:
            if stat is None:
                deliver()
            return stat is not None and waiting[0] and not self._closed
        try:
            await self._run(self._kazoo.DataWatch, path, changed)
            await gone
        finally:
            waiting[0] = False
