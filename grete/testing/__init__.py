"""grete in a test suite: a real broker in-process, on a free port, with a temporary data dir.

    from grete.testing import broker

    with broker(overrides={"num.partitions": "3"}) as b:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)

The broker runs its own event loop in a background thread; leaving the block stops it cleanly and
removes its data dir (unless ``data_dir`` was given).
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
from grete.broker.server import embedded_config

T = TypeVar("T")


class RunningBroker:
    """A broker started by :func:`broker`; call into its loop with :meth:`call`."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.broker = broker
        self.loop = loop
        self.thread = thread

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

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` (a function or coroutine function) on the broker's loop; return its result."""
        async def run() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        self.call(lambda: self.broker.create_topic(name, partitions, 1, dict(configs or {})))


@contextmanager
def broker(overrides: Mapping[str, str] | None = None, *, data_dir: str | Path | None = None,
           topics: Mapping[str, int] | None = None, strict: bool = True) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1 on a free port; stop it and clean up on exit.

    ``overrides`` are server.properties keys (unknown keys fail fast with their name when
    ``strict``); ``topics`` maps topic names to partition counts created up front.
    """
    owned_dir = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="grete-test-")) if data_dir is None else Path(data_dir)
    items = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(directory)}
    items.update(overrides or {})
    config = embedded_config([f"{k}={v}" for k, v in items.items()], strict=strict)
    loop = asyncio.new_event_loop()
    started: Future[Broker] = Future()
    thread = threading.Thread(target=_run_loop, args=(loop, config, started), name="grete-broker",
                              daemon=True)
    thread.start()
    try:
        running = RunningBroker(started.result(timeout=30), loop, thread)
        for name, count in (topics or {}).items():
            running.create_topic(name, count)
        yield running
    finally:
        if started.done() and started.exception() is None:
            asyncio.run_coroutine_threadsafe(started.result().stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        if owned_dir:
            shutil.rmtree(directory, ignore_errors=True)


def _run_loop(loop: asyncio.AbstractEventLoop, config: Any, started: Future[Broker]) -> None:
    asyncio.set_event_loop(loop)
    try:
        b = Broker(config)
        loop.run_until_complete(b.start())
    except BaseException as exc:  # surface start-up failures to the test, never hang it
        started.set_exception(exc)
        loop.close()
        return
    started.set_result(b)
    try:
        loop.run_forever()
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
