"""A real broker in this process, on its own event loop thread: :func:`broker` and :class:`RunningBroker`.

The public face is :mod:`grete.testing` (this module's names are re-exported there).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from grete.broker.broker import Broker
from grete.broker.network.eventloop import new_event_loop
from grete.broker.node import Node
from grete.broker.server import embedded_config
from grete.testing.common import TEST_DEFAULTS, BrokerStartError, scratch_root
from grete.testing.faults import FaultController
from grete.testing.process import broker_process

T = TypeVar("T")
CALL_TIMEOUT_S = 30.0


class RunningBroker:
    """A broker started by :func:`broker`; call into its loop with :meth:`call`."""

    def __init__(self, node: Node, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.node = node
        self.broker: Broker = node.broker
        self.loop = loop
        self.thread = thread
        self._faults: Any = None

    @property
    def host(self) -> str:
        return self.broker.advertised_listener.host

    @property
    def port(self) -> int:
        return self.broker.advertised_listener.port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.broker.data_dir()

    @property
    def faults(self) -> Any:
        """The :class:`~grete.testing.faults.FaultController` of this broker."""
        if self._faults is None:
            self._faults = FaultController(self)
        return self._faults

    def call(self, fn: Any, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        """Run ``fn(*args)`` (a function or coroutine function) on the broker's loop; return its result."""
        async def run() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        if not self.thread.is_alive():
            raise RuntimeError("the grete broker is stopped")
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=timeout)

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        self.call(lambda: self.broker.create_topic(name, partitions, 1, dict(configs or {})))

    def group_members(self, group: str) -> list[str]:
        """Member ids of a consumer group, as the coordinator knows them now ([] if no such group)."""
        def members() -> list[str]:
            found = self.broker.group_coordinator.groups.get(group)
            return list(found.members) if found is not None else []
        return list(self.call(members))

    def group_state(self, group: str) -> str:
        """The group's state as DescribeGroups reports it (Stable, PreparingRebalance, ...)."""
        return str(self.call(lambda: self.broker.group_coordinator.describe_group(group).state))


@contextmanager
def broker(overrides: Mapping[str, str] | None = None, *, data_dir: str | Path | None = None,
           topics: Mapping[str, int] | None = None, strict: bool = True,
           subprocess: bool = False, start_timeout: float = 30.0) -> Iterator[Any]:
    """Start a broker on 127.0.0.1 on a free port; stop it and clean up on exit.

    ``overrides`` are server.properties keys (unknown keys fail fast with their name when
    ``strict``); ``topics`` maps topic names to partition counts created up front. With
    ``subprocess=True`` the broker is a child process (:class:`~grete.testing.process.BrokerProcess`).
    """
    items = dict(TEST_DEFAULTS)
    items.update(overrides or {})
    if subprocess:
        with broker_process(items, data_dir=data_dir, topics=topics, strict=strict,
                            start_timeout=start_timeout) as child:
            yield child
        return
    owned_dir = data_dir is None
    directory = (Path(tempfile.mkdtemp(prefix="grete-test-", dir=scratch_root())) if data_dir is None
                 else Path(data_dir))
    items = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(directory), **items}
    try:
        config = embedded_config([f"{k}={v}" for k, v in items.items()], strict=strict)
    except BaseException:
        if owned_dir:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    loop = new_event_loop()
    started: Future[Node] = Future()
    thread = threading.Thread(target=_run_loop, args=(loop, config, started), name="grete-broker",
                              daemon=True)
    thread.start()
    try:
        running = RunningBroker(_started(started, start_timeout, items["listeners"]), loop, thread)
        for name, count in (topics or {}).items():
            running.create_topic(name, count)
        yield running
    finally:
        _shutdown(started, loop, thread)
        if owned_dir:
            shutil.rmtree(directory, ignore_errors=True)


def _started(started: Future[Node], timeout: float, listeners: str) -> Node:
    try:
        return started.result(timeout=timeout)
    except TimeoutError:
        raise BrokerStartError(f"grete broker did not start within {timeout} s") from None
    except OSError as exc:  # typically the port is in use
        raise BrokerStartError(f"grete broker could not listen on {listeners}: {exc}") from exc


def _shutdown(started: Future[Node], loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    if started.done() and started.exception() is None and thread.is_alive():
        asyncio.run_coroutine_threadsafe(started.result().stop(), loop).result(timeout=CALL_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=CALL_TIMEOUT_S)
    if thread.is_alive():
        raise RuntimeError("grete broker thread did not stop within 30 s")


def _run_loop(loop: asyncio.AbstractEventLoop, config: Any, started: Future[Node]) -> None:
    asyncio.set_event_loop(loop)
    b: Node | None = None
    try:
        b = Node(config)
        loop.run_until_complete(b.start())
    except BaseException as exc:  # surface start-up failures to the test, never hang it
        if b is not None:  # release what start() opened (logs, metadata, listeners bound so far)
            try:
                loop.run_until_complete(b.stop())
            except Exception:
                pass
        _close(loop)
        started.set_exception(exc)
        return
    started.set_result(b)
    try:
        loop.run_forever()
    finally:
        _close(loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left, stop the default executor's threads, close the loop."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
    asyncio.set_event_loop(None)
