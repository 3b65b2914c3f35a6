"""What an empty Fetch answer depends on, watched so that the same request asked again (an idle
consumer's long poll) is answered from the connection's memo until something it depends on moves.

The Fetch handler builds a :class:`Snapshot` for an answer with nothing to read and subclasses it with
its rules for a repeat that a change woke; the connection keeps it with the answer's bytes. Parking
on partitions (:func:`park_on`) and the deadline of a wait (:func:`expiry`) are the long polls' too.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from typing import Protocol

from grete.broker.replica import fetch_repeats as repeats
from grete.broker.replica.partition import Partition, fetch_state
from grete.broker.replica.partition_log_view import log_start_of
from grete.protocol.messages import FetchResponse


class Hosting(Protocol):
    """Where the live partitions are looked up (the broker's replicas, by topic and index)."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...


class Snapshot:
    """What an empty Fetch answer depends on, per partition: which Partition object served it (a
    deleted, or deleted and recreated, topic maps to none or to a new one), whether it is online, its
    leader epoch, and the four offsets (high watermark, last stable, log start, log end). Values are
    compared, not change counters: nothing that moves one of them can forget to bump a counter.

    Records cannot appear below an unchanged upper bound, so while all of this is unchanged an
    identical request gets a byte-identical answer.

    Repeats that wait (a long poll) park on the partitions through one future the snapshot keeps
    (its watch) for as long as it lives: a partition's wake completes it, and the snapshot then
    either re-parks (nothing it depends on moved) or tells the waiting repeats. Parking a repeat is
    a timer at its deadline; the timer answers it directly (no future of its own, no loop step in
    between). The connection calls :meth:`release` when it forgets the memo."""

    __slots__ = ("_broker", "partitions", "_keys", "_state", "_version", "_response", "_layout", "_watch",
                 "_waiting", "_released", "_committed", "_starts")

    def __init__(self, broker: Hosting, partitions: list[Partition], version: int, response: FetchResponse, *,
                 committed: bool = False) -> None:
        self._broker = broker
        self.partitions = partitions
        self._keys = [(p.topic, p.index) for p in partitions]
        self._state = list(map(fetch_state, partitions))
        self._starts = [state[4] for state in self._state]
        self._version = version
        self._response = response
        self._layout: repeats.Layout | None | bool = False  # False: not read yet
        self._watch: asyncio.Future[None] | None = None  # parked on every partition, while not done
        self._waiting: list[_Parked] = []  # repeats parked now
        self._released = False
        # Whether retention may move a log start past the fetch offset: only for read_committed, and
        # only below an open transaction (a last stable offset below the high watermark, which a
        # wake would report as the high watermark moves past the transaction's start).
        self._committed = committed and any(state[3] != state[2] for state in self._state)

    def reordered(self, first: bytes, repeat: bytes) -> bytes | None:
        """The answer for ``repeat`` (a frame, size prefix stripped) if it asks what ``first``, the
        request this answer was read for, asked, in another order of partitions; None if it does not.
        From the response header's tagged fields on, as the connection's memo keeps an answer."""
        if self._layout is False:
            self._layout = repeats.layout(first, self._version)
        if not isinstance(self._layout, repeats.Layout):
            return None
        other = repeats.layout(repeat, self._version)
        if other is None or not self._layout.same_fetch(other):
            return None
        return repeats.reordered_body(self._response, self._version, self._layout, other)

    def parked(self) -> bool:
        """Whether a repeat that will wait may park without comparing the values first: the watch
        has stayed parked since they were last found unchanged (a wake that changed nothing parks
        it again; one that changed something, or a wake not yet handled, leaves this False).

        What moves a value without a wake (a leader's append moves only the log end; retention
        moves only the log start, never past the high watermark) cannot make the Fetch handler
        answer before the deadline: it would find nothing to read, or a log start below the fetch
        offset, and wait as the repeat does. The repeat compares the values at its deadline, and
        from there takes the handler's path, so it answers what the handler would have, when it
        would have. Not for read_committed while a transaction is open (a last stable offset below
        the high watermark, which retention may pass: the handler answers OFFSET_OUT_OF_RANGE at
        once); without one the last stable offset is the high watermark, and stays it until a wake."""
        watch = self._watch
        return watch is not None and not watch.done() and not self._committed

    def wait(self, max_wait_ms: int, done: Callable[[bool, float], None]) -> None:
        """Park a repeat that arrives now, like a long poll on the snapshot's partitions (Kafka's
        DelayedFetch with nothing to read): ``done(unchanged, deadline)`` is called once, with False
        as soon as one of them changed (an append below the high watermark, DeleteRecords, deletion,
        a new leader), or at the deadline with whether the snapshot still holds. A wake that left
        the snapshot as it was parks again: the repeat is answered only when it can say something
        new, or when its time is up."""
        deadline = expiry(max_wait_ms)
        parked = _Parked(done, deadline)
        parked.timer = asyncio.get_running_loop().call_at(deadline, self._expired, parked)
        self._waiting.append(parked)
        if self._watch is None:
            self._park()

    def _park(self) -> None:
        watch = park_on(self.partitions, replica=False)
        watch.add_done_callback(self._woken)
        self._watch = watch

    def _woken(self, watch: asyncio.Future[None]) -> None:
        if watch is not self._watch:
            return  # released (cancelled) or replaced
        self._watch = None
        if not self._waiting:
            return  # the next repeat parks again
        if self.unchanged():
            self._park()
            return
        waiting, self._waiting = self._waiting, []
        for parked in waiting:
            assert parked.timer is not None
            parked.timer.cancel()
            parked.done(False, parked.deadline)

    def _expired(self, parked: _Parked) -> None:
        """A repeat's deadline: is the memo's answer still the answer? While the watch has stayed
        parked since the values were last found unchanged (:meth:`parked`), the only one of them
        the answer shows that can have moved is the log start (retention, never past the high
        watermark or, for these, the last stable offset): those are compared, C-level. Otherwise
        all of them are."""
        self._waiting.remove(parked)
        quiet = self.parked()
        if self._released and not self._waiting:
            self._unpark()
        unchanged = list(map(log_start_of, self.partitions)) == self._starts if quiet else self.unchanged()
        parked.done(unchanged, parked.deadline)

    def release(self) -> None:
        """The connection forgets this snapshot: its watch leaves the partitions once no repeat
        waits on it (a cancelled future is dropped from their lists at their next sweep)."""
        self._released = True
        if not self._waiting:
            self._unpark()

    def _unpark(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()

    def unchanged(self) -> bool:
        # The live (topic, partition) -> Partition map, read each time; Partition compares by identity.
        return (list(map(self._broker.partitions.get, self._keys)) == self.partitions
                and list(map(fetch_state, self.partitions)) == self._state)


class _Parked:
    """A repeat parked on a snapshot: what to call, its deadline and its timer."""

    __slots__ = ("done", "deadline", "timer")

    def __init__(self, done: Callable[[bool, float], None], deadline: float) -> None:
        self.done = done
        self.deadline = deadline
        self.timer: asyncio.TimerHandle | None = None


def expiry(max_wait_ms: int) -> float:
    """The loop time at which a Fetch arriving now stops waiting for ``max_wait_ms``.

    Kafka parks a waiting Fetch in a timing wheel of 1 ms ticks, and an operation expires at the start
    of the tick its deadline falls in: the deadline is rounded down to a whole millisecond, so a 1 ms
    wait lasts 0-1 ms and a 500 ms wait 499-500 ms. Clients tuned on Kafka (a
    small ``fetch.max.wait.ms`` to poll fast) get the same pace here."""
    now_ms = asyncio.get_running_loop().time() * 1000
    return math.floor(now_ms + max_wait_ms) / 1000


def park_on(partitions: list[Partition], *, replica: bool) -> asyncio.Future[None]:
    """One future parked on every partition of a fetch: done when the first of them has news."""
    parked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.waiter(replica=replica, future=parked)
    return parked
