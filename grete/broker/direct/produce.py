"""Direct produce regions: producers write batches into a region, announce them, the broker appends.

A region is a header page (the ordering word, the sealed word) and a data area. Every write has an
*order*: a shared producer gets it, with its byte range, from one fetch-and-add on the ordering
word; an exclusive producer (the region is its alone) counts for itself. The broker takes the
announcements strictly in order, so the data area is consumed as a chain of reservations: order n
starts where order n-1 ended, which is how an announcement outside its reservation is recognised.

Each announced batch is copied out of the region (what is validated is what is appended: the
region stays writable by its producers) and goes through the append path TCP Produce uses (the
replica layer's ``Appends.append_records``: header, CRC, sequence and size checks, offsets,
indexes, high watermark). A batch that fails validation never reaches the log, so readers never
see it.

A producer that dies between reservation and announcement leaves a gap in the order chain; after
``direct.produce.timeout.ms`` the broker **seals** the region (docs/direct.md explains the choice
over a filler batch): what is pending is answered PRODUCER_FENCED, producers re-register, and the
region's bytes never reach the log.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grete.direct.layout import (
    ACK,
    FLAG_SKIP,
    HEADER_BYTES,
    ORDER_MASK,
    ORDER_WORD,
    SEALED_WORD,
    split_word,
)
from grete.direct.shm import ShmRegion
from grete.protocol.errors import ErrorCode
from grete.protocol.records.batch import BATCH_OVERHEAD

log = logging.getLogger(__name__)

# (session, a 32-byte ACK frame): how an answer reaches its producer
Reply = Callable[[int, bytes], None]


@dataclass(slots=True)
class Announced:
    session: int
    offset: int
    length: int
    flags: int


@dataclass(eq=False)
class ProduceRegion:
    """One region of one partition, and where the broker is in its order chain."""

    id: int
    key: int
    topic: str
    index: int
    path: Path
    shm: ShmRegion
    data_length: int
    exclusive_session: int | None
    sessions: set[int] = field(default_factory=set)
    next_order: int = 0
    next_offset: int = 0
    pending: dict[int, Announced] = field(default_factory=dict)
    sealed: bool = False
    retiring: bool = False  # a newer region took over; this one goes once every reservation is in
    timer: asyncio.TimerHandle | None = None
    on_seal: list[Callable[[], None]] = field(default_factory=list)  # e.g. an rdma registration's release

    @classmethod
    def create(cls, directory: Path, region_id: int, topic: str, index: int, data_length: int,
               exclusive_session: int | None) -> ProduceRegion:
        path = directory / f"produce-{region_id}.region"
        shm = ShmRegion(path, HEADER_BYTES + data_length, writable=True, create=True)
        return cls(region_id, secrets.randbits(63), topic, index, path, shm, data_length, exclusive_session)

    def full(self) -> bool:
        """Shared: the ordering word has passed the end (the next reservation overflows)."""
        return split_word(self.shm.load(ORDER_WORD))[1] >= self.data_length

    def all_in(self) -> bool:
        """Every reservation made so far has been announced and taken."""
        if self.pending:
            return False
        if self.exclusive_session is not None:
            return True
        return split_word(self.shm.load(ORDER_WORD))[0] == self.next_order

    def seal(self) -> None:
        """No more writes: producers see the sealed word, announcements get PRODUCER_FENCED."""
        self.sealed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        try:
            self.shm.store(SEALED_WORD, 1)
        except (ValueError, TypeError):
            pass  # already closed
        self.shm.close()
        self.path.unlink(missing_ok=True)
        for release in self.on_seal:
            release()


# Announcements held behind a gap in the order chain; beyond this many the rest are refused.
MAX_PENDING = 4096

Append = Callable[[str, int, bytearray], tuple[int, int, int]]  # (error code, base offset, append time)


class RegionChain:
    """Takes announcements for the regions of this broker in order and answers each."""

    def __init__(self, append: Append, reply: Reply, timeout_ms: int) -> None:
        self._append = append
        self._reply = reply
        self._timeout_s = timeout_ms / 1000
        self.regions: dict[int, ProduceRegion] = {}

    def announce(self, session: int, key: int, region_id: int, order: int, flags: int, offset: int,
                 length: int) -> None:
        region = self.regions.get(region_id)
        if region is None or region.key != key or region.sealed:
            # A stale key, a sealed or unknown region: the producer must register again.
            self._answer(session, region_id, order, ErrorCode.PRODUCER_FENCED)
            return
        if region.exclusive_session is not None and region.exclusive_session != session:
            self._answer(session, region_id, order, ErrorCode.PRODUCER_FENCED)
            return
        if order in region.pending or len(region.pending) >= MAX_PENDING:
            # A repeated order, or announcements running far ahead of a gap: not a producer
            # following the protocol (each reserves before it announces).
            self._answer(session, region_id, order, ErrorCode.INVALID_REQUEST)
            return
        region.pending[order] = Announced(session, offset, length, flags)
        self._drain(region)

    def _drain(self, region: ProduceRegion) -> None:
        progressed = False
        while not region.sealed and region.next_order in region.pending:
            announced = region.pending.pop(region.next_order)
            self._take(region, region.next_order, announced)
            progressed = True
        if region.sealed:
            return
        if region.pending:
            # The timeout counts from the moment the chain last moved: a gap, not a busy region.
            if progressed or region.timer is None:
                if region.timer is not None:
                    region.timer.cancel()
                region.timer = asyncio.get_running_loop().call_later(self._timeout_s, self._expired, region)
        elif region.timer is not None and not region.retiring:
            region.timer.cancel()
            region.timer = None
        if region.retiring and region.all_in():
            self.drop(region, "retired")

    def _take(self, region: ProduceRegion, order: int, announced: Announced) -> None:
        offset, length = announced.offset, announced.length
        if offset != region.next_offset:
            # Not where this order's reservation starts: the chain is broken from here on.
            self._answer(announced.session, region.id, order, ErrorCode.INVALID_REQUEST)
            log.warning("direct region %d of %s-%d: order %d announced at byte %d, its reservation starts "
                        "at %d; sealing the region", region.id, region.topic, region.index, order, offset,
                        region.next_offset)
            self.drop(region, "broken order chain")
            return
        region.next_order = (order + 1) & ORDER_MASK
        region.next_offset = offset + length
        if announced.flags & FLAG_SKIP:
            return  # an overflowing reservation: the order is used up, nothing was written
        if length < BATCH_OVERHEAD or offset + length > region.data_length:
            self._answer(announced.session, region.id, order, ErrorCode.INVALID_REQUEST)
            return
        start = HEADER_BYTES + offset
        data = region.shm.copy(start, length)  # a private copy: producers can still write the region
        try:
            code, base_offset, append_time = self._append(region.topic, region.index, data)
        except Exception:  # the produce path answers KafkaErrors itself; anything else is a bug
            log.exception("direct append to %s-%d failed", region.topic, region.index)
            code, base_offset, append_time = ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1
        self._answer(announced.session, region.id, order, code, base_offset, append_time)

    def _answer(self, session: int, region_id: int, order: int, code: int, base_offset: int = -1,
                append_time: int = -1) -> None:
        self._reply(session, ACK.pack(region_id, order, code, base_offset, append_time))

    def retire(self, region: ProduceRegion) -> None:
        """A newer region took over: drop this one once every reservation in it is in, or after the
        timeout if one never comes (a producer that died holding the last reservation)."""
        region.retiring = True
        if region.all_in():
            self.drop(region, "retired")
        elif region.timer is None:
            region.timer = asyncio.get_running_loop().call_later(self._timeout_s, self._expired, region)

    def _expired(self, region: ProduceRegion) -> None:
        region.timer = None
        if region.sealed or not (region.pending or region.retiring):
            return
        log.warning("direct region %d of %s-%d: order %d reserved but not announced within %.1f s; "
                    "sealing the region", region.id, region.topic, region.index, region.next_order,
                    self._timeout_s)
        self.drop(region, "timeout")

    def drop(self, region: ProduceRegion, why: str) -> None:
        """Seal and forget ``region``; announcements still pending are fenced (re-register, resend)."""
        if region.sealed:
            return
        pending, region.pending = region.pending, {}
        region.seal()
        self.regions.pop(region.id, None)
        for order, announced in sorted(pending.items()):
            self._answer(announced.session, region.id, order, ErrorCode.PRODUCER_FENCED)
        log.debug("direct region %d of %s-%d dropped: %s", region.id, region.topic, region.index, why)

    def session_closed(self, session: int) -> None:
        for region in list(self.regions.values()):
            region.sessions.discard(session)
            if region.exclusive_session == session:
                self.drop(region, "its exclusive producer left")
