"""The broker's order chain on its own (no broker): announcements taken in order, the timeout that
seals a region counting from the chain's last move, and retired regions going away."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grete.broker.direct.produce import ProduceRegion, RegionChain
from grete.direct.layout import ACK, FLAG_SKIP, ORDER_WORD, reservation_delta
from grete.protocol.errors import ErrorCode
from grete.protocol.records.record import build_batch, simple_records

TIMEOUT_MS = 60


class Harness:
    def __init__(self, directory: Path) -> None:
        self.appended: list[bytes] = []
        self.answers: list[tuple[int, int, int]] = []  # (session, order, code)
        self.chain = RegionChain(self._append, self._reply, TIMEOUT_MS)
        self.region = ProduceRegion.create(directory, 1, "t", 0, 1 << 16, None)
        self.chain.regions[1] = self.region

    def _append(self, topic: str, index: int, data: bytearray) -> tuple[int, int, int]:
        self.appended.append(bytes(data))
        return 0, len(self.appended) - 1, -1

    def _reply(self, session: int, frame: bytes) -> None:
        _, order, code, _, _ = ACK.unpack(frame)
        self.answers.append((session, order, code))

    def reserve_write(self, data: bytes) -> tuple[int, int]:
        word = self.region.shm.fetch_add(ORDER_WORD, reservation_delta(len(data)))
        order, offset = (word >> 48) & 0xFFFF, word & ((1 << 48) - 1)
        self.region.shm.write(4096 + offset, data)
        return order, offset

    def announce(self, session: int, order: int, offset: int, length: int, flags: int = 0) -> None:
        self.chain.announce(session, self.region.key, 1, order, flags, offset, length)


def _batch(value: bytes) -> bytes:
    return bytes(build_batch(simple_records([value]), base_timestamp=1_000))


def test_out_of_order_announcements_are_taken_in_reservation_order(tmp_path: Path) -> None:
    async def run() -> Harness:
        h = Harness(tmp_path)
        reserved = [h.reserve_write(_batch(b"%d" % i)) for i in range(3)]
        for i in (2, 0, 1):
            h.announce(7, reserved[i][0], reserved[i][1], len(_batch(b"%d" % i)))
        return h
    h = asyncio.run(run())
    assert h.appended == [_batch(b"0"), _batch(b"1"), _batch(b"2")]
    assert [order for _, order, _ in h.answers] == [0, 1, 2]


def test_a_busy_region_is_not_sealed_while_its_chain_moves(tmp_path: Path) -> None:
    """Some announcement always waits behind a gap, but the gaps keep closing: the timeout counts
    from the chain's last move, so the region outlives many timeouts."""
    async def run() -> Harness:
        h = Harness(tmp_path)
        batch = _batch(b"x")
        gap = h.reserve_write(batch)
        behind = h.reserve_write(batch)
        h.announce(1, behind[0], behind[1], len(batch))
        for _ in range(8):
            next_gap, next_behind = h.reserve_write(batch), h.reserve_write(batch)
            h.announce(1, next_behind[0], next_behind[1], len(batch))
            await asyncio.sleep(TIMEOUT_MS / 1000 / 2)
            h.announce(1, gap[0], gap[1], len(batch))  # the older gap closes; the newer one stays
            gap = next_gap
            assert h.region.pending  # never empty: something always waits
        h.announce(1, gap[0], gap[1], len(batch))
        return h
    h = asyncio.run(run())
    assert not h.region.sealed
    assert {code for _, _, code in h.answers} == {0} and len(h.appended) == 18


def test_a_gap_that_stays_seals_the_region_and_fences_the_waiting(tmp_path: Path) -> None:
    async def run() -> Harness:
        h = Harness(tmp_path)
        batch = _batch(b"x")
        h.reserve_write(batch)  # a producer that never announces
        nxt = h.reserve_write(batch)
        h.announce(3, nxt[0], nxt[1], len(batch))
        await asyncio.sleep(TIMEOUT_MS / 1000 * 3)
        return h
    h = asyncio.run(run())
    assert h.region.sealed and h.appended == []
    assert h.answers == [(3, 1, ErrorCode.PRODUCER_FENCED)]


def test_a_retired_region_goes_when_its_last_reservation_is_in_or_times_out(tmp_path: Path) -> None:
    async def run() -> tuple[Harness, bool]:
        h = Harness(tmp_path)
        batch = _batch(b"x")
        first = h.reserve_write(batch)
        h.announce(1, first[0], first[1], len(batch))
        h.reserve_write(batch)  # reserved by a producer that dies
        h.chain.retire(h.region)
        still_there = not h.region.sealed
        await asyncio.sleep(TIMEOUT_MS / 1000 * 3)
        return h, still_there
    h, still_there = asyncio.run(run())
    assert still_there and h.region.sealed and 1 not in h.chain.regions
    assert len(h.appended) == 1


def test_an_overflow_skip_moves_the_chain_without_appending(tmp_path: Path) -> None:
    async def run() -> Harness:
        h = Harness(tmp_path)
        order, offset = h.reserve_write(b"")
        h.announce(1, order, offset, 0, FLAG_SKIP)
        batch = _batch(b"after")
        nxt = h.reserve_write(batch)
        h.announce(1, nxt[0], nxt[1], len(batch))
        return h
    h = asyncio.run(run())
    assert h.appended == [_batch(b"after")] and h.answers == [(1, 1, 0)]
