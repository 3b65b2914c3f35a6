"""Fault injection for a broker started by :func:`grete.testing.broker`.

Everything a test calls (``b.faults.fail(...)``, ``delay``, ``close_on``, ``pause_partition``,
``drop_connections``, ``expire_member``) runs on the test's thread and is marshalled into the
broker's event loop, where the rules live; nothing is shared between threads but the hit counts.

The broker side is one seam in ``KafkaConnection._dispatch``: while ``broker.faults`` is None (the
default, and again once every rule is gone) a request costs one attribute read more; while it is
set, :meth:`Faults.handle` runs the handler in its place and may

* answer with an error: a response of the request's own API and version built from the request
  (:mod:`grete.protocol.shapes`), every error code set; with a ``topic``/``partition`` filter only
  the matching partitions fail and the rest of the request is processed as usual;
* defer the request (``delay``, a paused partition), keeping the connection's processing order:
  a later request on the same connection is not handled before an earlier one, as Kafka
  processes one request per connection at a time;
* close the connection instead of answering, as Kafka does when it cannot.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from grete.broker.requests.context import CloseConnection, RequestContext
from grete.broker.requests.services import Everything
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import APIS
from grete.protocol.shapes import detach, error_response, merge, split

if TYPE_CHECKING:
    from grete.broker.broker import Broker
    from grete.broker.network.connection import KafkaConnection
    from grete.broker.requests.registry import Handler

PRODUCE = 0
_BY_NAME = {info.name.lower(): key for key, info in APIS.items()}


def api_key(api: str | int) -> int:
    """An API key from Kafka's name (``"Produce"``) or the number; unknown ones fail with a list."""
    if isinstance(api, int) and api in APIS:
        return api
    if isinstance(api, str) and api.lower() in _BY_NAME:
        return _BY_NAME[api.lower()]
    raise ValueError(f"unknown Kafka API {api!r}; expected a key 0-{max(APIS)} or one of: "
                     + ", ".join(info.name for info in APIS.values()))


def error_code(error: ErrorCode | int | str) -> ErrorCode:
    if isinstance(error, str):
        try:
            return ErrorCode[error.upper()]
        except KeyError:
            raise ValueError(f"unknown Kafka error code {error!r}") from None
    try:
        return ErrorCode(error)
    except ValueError:
        raise ValueError(f"unknown Kafka error code {error!r}") from None


# --- rules (owned by the broker loop) --------------------------------------------------------
@dataclass(eq=False)
class _Rule:
    kind: str                       # "fail" | "delay" | "close"
    api_key: int
    topic: str | None = None
    partition: int | None = None
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    seconds: float = 0.0
    remaining: int | None = None    # None: until removed
    while_: Callable[[], bool] | None = None
    handle: Fault | None = None

    @property
    def filtered(self) -> bool:
        return self.topic is not None or self.partition is not None

    def wants(self, topic: str | None, topic_id: Any, partition: int | None) -> bool:
        return (self.topic is None or topic == self.topic or (topic_id is not None and topic_id == self._id)) \
            and (self.partition is None or partition == self.partition)

    _id: Any = None                 # the topic's id, for requests that name topics by id only


@dataclass
class _Match:
    rule: _Rule
    rest: Any = None                # the request minus the failing partitions (filtered fails)
    only: Any = None                # just the failing partitions


@dataclass
class _Pause:
    resumed: asyncio.Future[None]
    held: int = 0


@dataclass(eq=False)
class Faults:
    """The broker-side state: installed as ``broker.faults`` while any fault is active."""

    broker: Broker
    rules: list[_Rule] = field(default_factory=list)
    paused: dict[tuple[str, int], _Pause] = field(default_factory=dict)
    _tails: dict[KafkaConnection, asyncio.Future[None]] = field(default_factory=dict)
    _pending: int = 0

    # --- the seam -----------------------------------------------------------------------
    def handle(self, conn: KafkaConnection, handler: Handler, ctx: RequestContext[Everything], request: Any) -> Any:
        """Answer ``request`` as ``handler`` would, with whatever fault applies to it."""
        match = self._match(ctx, request)
        tail = self._tails.get(conn)
        held = self._held_by(ctx, request)
        if tail is None and not held and (match is None or match.rule.kind != "delay"):
            self.maybe_uninstall()
            return self._apply(handler, ctx, request, match)
        for pause in held:
            pause.held += 1
        detach(request)  # it outlives the connection's read buffer now
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[conn] = started
        self._pending += 1
        return self._deferred(conn, handler, ctx, request, match, tail, started)

    async def _deferred(self, conn: KafkaConnection, handler: Handler, ctx: RequestContext[Everything], request: Any,
                        match: _Match | None, tail: asyncio.Future[None] | None,
                        started: asyncio.Future[None]) -> Any:
        try:
            if tail is not None:
                await tail
            while held := self._held_by(ctx, request):
                await asyncio.wait([p.resumed for p in held])
            if match is not None and match.rule.kind == "delay":
                await asyncio.sleep(match.rule.seconds)
            try:
                result = self._apply(handler, ctx, request, match)
            except CloseConnection:
                conn.close()
                return None
        finally:
            if not started.done():
                started.set_result(None)
            if self._tails.get(conn) is started:
                del self._tails[conn]
            self._pending -= 1
            self.maybe_uninstall()
        if inspect.isawaitable(result):
            return await result
        return result

    def _apply(self, handler: Handler, ctx: RequestContext[Everything], request: Any, match: _Match | None) -> Any:
        if match is None or match.rule.kind == "delay":
            return handler.fn(ctx, request)
        rule = match.rule
        if rule.kind == "close" or (ctx.api_key == PRODUCE and request.acks == 0):
            # acks=0 expects no answer: closing is the only error signal Kafka has for it.
            raise CloseConnection(f"grete.testing: injected close on {handler.name}")
        if not rule.filtered:
            return error_response(handler.response_cls, request, ctx.version, rule.error, rule.message)
        failed = error_response(handler.response_cls, match.only, ctx.version, rule.error, rule.message,
                                top_level=False)
        if match.rest is None:
            return failed
        result = handler.fn(ctx, match.rest)
        if inspect.isawaitable(result):
            return _merge_later(result, failed, ctx.version)
        return None if result is None else merge(result, failed, ctx.version)

    # --- matching -----------------------------------------------------------------------
    def _match(self, ctx: RequestContext[Everything], request: Any) -> _Match | None:
        for rule in list(self.rules):
            if rule.api_key != ctx.api_key:
                continue
            if rule.while_ is not None and not rule.while_():
                self.rules.remove(rule)
                continue
            match = _Match(rule)
            if rule.filtered:
                rule._id = self.broker.topic_id_for(rule.topic) if rule.topic else None
                match.rest, match.only = split(request, ctx.version, rule.wants)
                if match.only is None:
                    continue
            self._hit(rule)
            return match
        return None

    def _hit(self, rule: _Rule) -> None:
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:  # handle() uninstalls once this request is accounted for
                self.rules.remove(rule)
        if rule.handle is not None:
            rule.handle._hit()

    def _held_by(self, ctx: RequestContext[Everything], request: Any) -> list[_Pause]:
        """The paused partitions a Produce request appends to."""
        if not self.paused or ctx.api_key != PRODUCE:
            return []
        held = []
        for topic in request.topic_data:
            for part in topic.partition_data:
                pause = self.paused.get((topic.name, part.index))
                if pause is not None:
                    held.append(pause)
        return held

    # --- administration (on the loop) ------------------------------------------------------
    def add(self, rule: _Rule) -> None:
        self.rules.append(rule)
        self.broker.faults = self

    def remove(self, rule: _Rule) -> None:
        if rule in self.rules:
            self.rules.remove(rule)
        self.maybe_uninstall()

    def pause(self, topic: str, partition: int) -> None:
        self.broker.partition(topic, partition)  # UNKNOWN_TOPIC_OR_PARTITION for a typo
        if (topic, partition) not in self.paused:
            self.paused[(topic, partition)] = _Pause(asyncio.get_running_loop().create_future())
        self.broker.faults = self

    def resume(self, topic: str, partition: int) -> None:
        pause = self.paused.pop((topic, partition), None)
        if pause is not None:
            pause.resumed.set_result(None)
        self.maybe_uninstall()

    def clear(self) -> None:
        self.rules.clear()
        for key in list(self.paused):
            self.resume(*key)
        self.maybe_uninstall()

    def maybe_uninstall(self) -> None:
        """Back to the zero-cost path once nothing is active or in flight."""
        if not self.rules and not self.paused and not self._pending and self.broker.faults is self:
            self.broker.faults = None


async def _merge_later(result: Any, failed: Any, version: int) -> Any:
    response = await result
    return None if response is None else merge(response, failed, version)


# --- the test thread's side -------------------------------------------------------------------
class Fault:
    """A handle on one injected fault; a context manager that removes it on exit."""

    def __init__(self, controller: FaultController, rule: _Rule) -> None:
        self._controller = controller
        self._rule = rule
        self._hits = 0
        self._cond = threading.Condition()
        rule.handle = self

    @property
    def hits(self) -> int:
        """How many requests this fault answered (or delayed, or closed) so far."""
        return self._hits

    def _hit(self) -> None:  # on the broker loop
        with self._cond:
            self._hits += 1
            self._cond.notify_all()

    def wait(self, hits: int = 1, timeout: float = 10.0) -> None:
        """Block until the fault was hit ``hits`` times; TimeoutError (never a hang) otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._hits >= hits, timeout):
                raise TimeoutError(f"{self!r} was hit {self._hits} time(s) in {timeout} s, expected {hits}")

    def remove(self) -> None:
        self._controller._remove(self._rule)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        r = self._rule
        where = f" {r.topic}" + (f"-{r.partition}" if r.partition is not None else "") if r.filtered else ""
        what = r.error.name if r.kind == "fail" else (f"{r.seconds}s" if r.kind == "delay" else "")
        return f"<Fault {r.kind} {APIS[r.api_key].name}{where} {what}>"


class PausedPartition:
    """Returned by ``pause_partition``; resumes the partition on ``resume()`` or on exit."""

    def __init__(self, controller: FaultController, topic: str, partition: int) -> None:
        self._controller, self.topic, self.partition = controller, topic, partition

    @property
    def held(self) -> int:
        """How many produce requests waited (or wait) on this pause."""
        return int(self._controller._call(self._held))

    def _held(self) -> int:
        faults = self._controller._running.broker.faults
        pause = faults.paused.get((self.topic, self.partition)) if faults is not None else None
        return pause.held if pause is not None else 0

    def wait_held(self, count: int = 1, timeout: float = 10.0) -> None:
        """Block until ``count`` produce requests are waiting on this pause."""
        _poll(lambda: self.held >= count, timeout, f"{count} produce request(s) held on "
              f"{self.topic}-{self.partition}")

    def resume(self) -> None:
        self._controller.resume_partition(self.topic, self.partition)

    def __enter__(self) -> PausedPartition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume()


class Running(Protocol):
    """The test's handle on a running broker (``grete.testing.RunningBroker``)."""

    broker: Broker

    def call(self, fn: Any, *args: Any, timeout: float = ...) -> Any: ...


class FaultController:
    """``RunningBroker.faults``: inject faults from the test thread."""

    def __init__(self, running: Running) -> None:
        self._running = running

    # --- rules ------------------------------------------------------------------------------
    def fail(self, api: str | int, error: ErrorCode | int | str = ErrorCode.NOT_LEADER_OR_FOLLOWER, *,
             times: int | None = None, while_: Callable[[], bool] | None = None, topic: str | None = None,
             partition: int | None = None, message: str | None = None) -> Fault:
        """Answer ``api`` with ``error`` (every error field of a correctly built response).

        ``times``: for this many requests, then the fault removes itself (default: until removed).
        ``while_``: a no-argument predicate, called on the broker thread per request; the fault
        ends once it returns False. ``topic``/``partition``: only those partitions fail, the rest
        of each request is processed normally.
        """
        code = error_code(error)
        return self._add(_Rule("fail", api_key(api), topic, partition, error=code, message=message,
                               remaining=_times(times), while_=while_))

    def delay(self, api: str | int, seconds: float, *, times: int | None = None,
              while_: Callable[[], bool] | None = None, topic: str | None = None,
              partition: int | None = None) -> Fault:
        """Hold matching requests ``seconds`` before processing them (later requests on the same
        connection wait behind them, as on a slow broker)."""
        if seconds < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {seconds}")
        return self._add(_Rule("delay", api_key(api), topic, partition, seconds=seconds,
                               remaining=_times(times), while_=while_))

    def close_on(self, api: str | int, *, times: int | None = 1, while_: Callable[[], bool] | None = None,
                 topic: str | None = None, partition: int | None = None) -> Fault:
        """Close the connection instead of answering the next ``times`` matching requests (the
        request is not processed)."""
        return self._add(_Rule("close", api_key(api), topic, partition, remaining=_times(times),
                               while_=while_))

    def clear(self) -> None:
        """Remove every fault and resume every paused partition."""
        self._call(lambda: self._installed().clear())

    # --- one-shot actions -------------------------------------------------------------------
    def drop_connections(self) -> int:
        """Close every client connection now (as a broker restart or network blip would);
        returns how many were closed. Clients reconnect on their own."""
        def drop() -> int:
            connections = list(self._running.broker.connections)
            for conn in connections:
                conn.close()
            return len(connections)
        return int(self._call(drop))

    def pause_partition(self, topic: str, partition: int = 0) -> PausedPartition:
        """Hold produce requests to this partition (unanswered, not appended) until resumed."""
        self._call(lambda: self._installed().pause(topic, partition))
        return PausedPartition(self, topic, partition)

    def resume_partition(self, topic: str, partition: int = 0) -> None:
        """Process the held produce requests, in arrival order."""
        self._call(lambda: self._installed().resume(topic, partition))

    def expire_member(self, group: str, member_id: str) -> None:
        """Expire a member's session now, exactly as its session timer would: it leaves the group
        and the group rebalances; the member learns it on its next heartbeat (UNKNOWN_MEMBER_ID)."""
        def expire() -> None:
            coordinator = self._running.broker.group_coordinator
            found = coordinator.groups.get(group)
            if found is None:
                raise LookupError(f"no group {group!r}; groups: {sorted(coordinator.groups)}")
            member = found.members.get(member_id)
            if member is None:
                raise LookupError(f"group {group!r} has no member {member_id!r}; members: "
                                  f"{sorted(found.members)}")
            coordinator.remove_member_and_update_group(
                found, member, f"member {member_id} session expired (grete.testing.expire_member)")
        self._call(expire)

    # --- plumbing ---------------------------------------------------------------------------
    def _add(self, rule: _Rule) -> Fault:
        handle = Fault(self, rule)
        self._call(lambda: self._installed().add(rule))
        return handle

    def _remove(self, rule: _Rule) -> None:
        self._call(lambda: self._installed().remove(rule))

    def _installed(self) -> Faults:
        """The broker's Faults (on the loop), creating it on first use."""
        broker = self._running.broker
        faults = broker.faults if broker.faults is not None else getattr(self, "_faults", None)
        if faults is None:
            faults = Faults(broker)
        self._faults = faults
        return faults

    def _call(self, fn: Callable[[], Any]) -> Any:
        return self._running.call(fn)


def _times(times: int | None) -> int | None:
    if times is not None and times < 1:
        raise ValueError(f"times must be >= 1 (or None for 'until removed'), got {times}")
    return times


def _poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)
