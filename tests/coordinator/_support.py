"""Helpers for the coordinator tests: run coroutines, build a started coordinator, join members."""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import GroupConfig, JoinResult, SyncResult
from grete.protocol.errors import ErrorCode
from grete.protocol.messages.consumer_protocol import ConsumerProtocolSubscription

T = TypeVar("T")

# Small timeouts keep the timer tests fast; the minimum session timeout is lowered to allow them.
SESSION_MS = 400
REBALANCE_MS = 400


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Decorator-free runner: ``run(lambda: body())`` or as a decorator on an async test body."""
    return asyncio.run(coro_fn())


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Turn an ``async def test_x(...)`` into a plain pytest test (pytest-asyncio is not installed)."""

    @functools.wraps(fn)  # keeps the signature, so pytest can parametrize it
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), timeout=20))

    return wrapper


def config(**overrides: Any) -> GroupConfig:
    base: dict[str, Any] = dict(group_min_session_timeout_ms=10, group_initial_rebalance_delay_ms=0,
                                offsets_topic_num_partitions=4)
    base.update(overrides)
    return GroupConfig(**base)


async def started(store: InMemoryOffsetsStore | None = None, *, now_ms: Callable[[], int] | None = None,
                  **overrides: Any) -> GroupCoordinator:
    store = store if store is not None else InMemoryOffsetsStore()
    kwargs: dict[str, Any] = {} if now_ms is None else {"now_ms": now_ms}
    coord = GroupCoordinator(config(**overrides), store, **kwargs)
    await coord.start()
    return coord


def subscription(*topics: str, version: int = 1) -> bytes:
    """A Java consumer's subscription metadata: int16 version + ConsumerProtocolSubscription."""
    return struct.pack(">h", version) + ConsumerProtocolSubscription(topics=list(topics)).to_bytes(version)


def protos(*topics: str, names: tuple[str, ...] = ("range",)) -> list[tuple[str, bytes]]:
    meta = subscription(*(topics or ("t",)))
    return [(name, meta) for name in names]


def join(coord: GroupCoordinator, group: str = "g", member_id: str = "", *, instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, session_ms: int = SESSION_MS,
         rebalance_ms: int = REBALANCE_MS, require_known: bool = False, client_id: str = "client",
         protocol_type: str = "consumer", skip: bool = False, reason: str | None = None
         ) -> Coroutine[Any, Any, JoinResult]:
    return coord.join_group(group_id=group, member_id=member_id, group_instance_id=instance, client_id=client_id,
                            client_host="/127.0.0.1", session_timeout_ms=session_ms,
                            rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type,
                            protocols=protocols if protocols is not None else protos(),
                            require_known_member_id=require_known, reason=reason,
                            supports_skip_assignment=skip)


def sync(coord: GroupCoordinator, res: JoinResult, group: str = "g", *, instance: str | None = None,
         assignments: list[tuple[str, bytes]] | None = None) -> Coroutine[Any, Any, SyncResult]:
    return coord.sync_group(group_id=group, generation_id=res.generation_id, member_id=res.member_id,
                            group_instance_id=instance, protocol_type=res.protocol_type,
                            protocol_name=res.protocol_name, assignments=assignments or [])


def heartbeat(coord: GroupCoordinator, member_id: str, generation: int, group: str = "g",
              instance: str | None = None) -> Coroutine[Any, Any, ErrorCode]:
    return coord.heartbeat(group_id=group, generation_id=generation, member_id=member_id,
                           group_instance_id=instance)


async def join_all(*joins: Awaitable[JoinResult]) -> list[JoinResult]:
    return list(await asyncio.gather(*joins))


def task(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    return asyncio.get_running_loop().create_task(coro)


async def settle() -> None:
    """Let callbacks scheduled with call_later(0) and spawned tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def stable_group(coord: GroupCoordinator, n: int, group: str = "g",
                       protocols: list[tuple[str, bytes]] | None = None, **join_args: Any) -> list[JoinResult]:
    """n dynamic members joined and synced (the leader assigns ``b"<member id>"`` to each)."""
    results = await join_all(*(join(coord, group, protocols=protocols, **join_args) for _ in range(n)))
    assert all(r.error is ErrorCode.NONE for r in results), results
    leader = next(r for r in results if r.member_id == r.leader)
    assignments = [(m.member_id, m.member_id.encode()) for m in leader.members]
    syncs = await asyncio.gather(*(sync(coord, r, group, assignments=assignments if r is leader else None)
                                   for r in results))
    assert all(s.error is ErrorCode.NONE for s in syncs), syncs
    return results
