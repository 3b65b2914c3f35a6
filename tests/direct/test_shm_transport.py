"""The shm transport's verbs: a real atomic fetch-and-add across processes, the slot sequence lock,
bounds on writes, reads of a file cut short."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from grete.broker.config import ConfigError
from grete.broker.server import embedded_config
from grete.direct import atomics
from grete.direct.layout import ORDER_WORD, SLOT, SLOT_BYTES, reservation_delta, split_word
from grete.direct.shm import ShmFileReader, ShmRegion
from grete.direct.transport import transport

# Children are spawned, not forked: a fork copies locks that threads of earlier tests (librdkafka's,
# the broker's) hold, and a child could hang on one.
SPAWN = multiprocessing.get_context("spawn")

ROUNDS = 20_000


def _reserve(path: str, size: int, rounds: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    region = ShmRegion(path, 4096, writable=True)
    got = [region.fetch_add(ORDER_WORD, reservation_delta(size)) for _ in range(rounds)]
    out.put((size, got))


def test_fetch_add_races_from_processes_reserve_disjoint_ranges(tmp_path: Path) -> None:
    path = tmp_path / "r"
    region = ShmRegion(path, 4096, writable=True, create=True)
    queue: multiprocessing.Queue = SPAWN.Queue()  # type: ignore[type-arg]
    sizes = [100, 7, 61, 4096]
    procs = [SPAWN.Process(target=_reserve, args=(str(path), s, ROUNDS, queue)) for s in sizes]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    total = sum(sizes) * ROUNDS
    order, offset = split_word(region.load(ORDER_WORD))
    assert offset == total  # no lost update
    assert order == (len(sizes) * ROUNDS) & 0xFFFF
    starts = sorted(split_word(v)[1] for _, r in results for v in r)
    assert len(set(starts)) == len(starts)  # every reservation began somewhere else
    # ... and reservations tile the range exactly: each starts where the previous one ended
    sizes_by_start = {split_word(v)[1]: size for size, r in results for v in r}
    pos = 0
    for start in starts:
        assert start == pos
        pos += sizes_by_start[start]
    assert pos == total


def test_slot_snapshot_is_consistent_and_reads_what_was_written(tmp_path: Path) -> None:
    region = ShmRegion(tmp_path / "s", 4 * SLOT_BYTES, writable=True, create=True)
    reader = ShmRegion(tmp_path / "s", 4 * SLOT_BYTES, writable=False)
    for i in range(4):
        region.slot_write(i * SLOT_BYTES, (i, 10 * i, 20 * i, 30 * i, 40 * i, 50 * i, 60 * i, i & 1))
    region.slot_write(2 * SLOT_BYTES, (7, 7, 7, 7, 7, 7, 7, 7))  # rewritten: sequence 4
    dst = atomics.ffi().new("char[]", 4 * SLOT_BYTES)
    assert reader.snapshot_into(dst, 4, SLOT_BYTES)
    view = memoryview(atomics.ffi().buffer(dst))
    assert SLOT.unpack_from(view, 0) == (2, 0, 0, 0, 0, 0, 0, 0, 0)
    assert SLOT.unpack_from(view, SLOT_BYTES) == (2, 1, 10, 20, 30, 40, 50, 60, 1)
    assert SLOT.unpack_from(view, 2 * SLOT_BYTES) == (4, 7, 7, 7, 7, 7, 7, 7, 7)


def test_snapshot_refuses_a_slot_being_written(tmp_path: Path) -> None:
    region = ShmRegion(tmp_path / "s", SLOT_BYTES, writable=True, create=True)
    region.slot_write(0, (1, 2, 3, 4, 5, 6, 7, 0))
    region.store(0, region.load(0) + 1)  # a writer stopped half way: the sequence is odd
    dst = atomics.ffi().new("char[]", SLOT_BYTES)
    assert not region.snapshot_into(dst, 1, SLOT_BYTES)


def test_writes_outside_the_region_are_refused(tmp_path: Path) -> None:
    region = ShmRegion(tmp_path / "r", 4096, writable=True, create=True)
    with pytest.raises(ValueError, match="outside"):
        region.write(4090, b"x" * 10)
    region.write(4086, b"y" * 10)
    assert region.read(4086, 10) == b"y" * 10
    assert bytes(region.copy(4086, 10)) == b"y" * 10


def test_a_file_cut_short_reads_short_never_faults(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(b"a" * 1000)
    reader = ShmFileReader(str(path))
    os.truncate(path, 100)
    assert reader.read(50, 500) == b"a" * 50
    reader.close()


def test_unknown_transport_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="shm or rdma"):
        transport("tcp")


def test_the_module_is_built_once_per_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRETE_CACHE", str(tmp_path))
    first = atomics.build()
    assert first.parent == tmp_path / "direct"
    mtime = first.stat().st_mtime_ns
    assert atomics.build() == first and first.stat().st_mtime_ns == mtime


def test_changed_check_sees_every_slot_write_and_nothing_else(tmp_path: Path) -> None:
    region = ShmRegion(tmp_path / "s", 3 * SLOT_BYTES, writable=True, create=True)
    dst = atomics.ffi().new("char[]", 3 * SLOT_BYTES)
    changed = region.changed_check(dst, 3, SLOT_BYTES)
    assert region.snapshot_into(dst, 3, SLOT_BYTES)
    assert changed() == 0
    region.slot_write(2 * SLOT_BYTES, (1, 2, 3, 4, 5, 6, 7, 8))
    assert changed() == 1
    assert region.snapshot_into(dst, 3, SLOT_BYTES)
    assert changed() == 0


def test_the_broker_refuses_a_transport_it_does_not_have() -> None:
    with pytest.raises(ConfigError, match="direct.transports"):
        embedded_config(["direct.transports=tcp"], strict=True)
    assert embedded_config([], strict=True).get_list("direct.transports") == []  # off by default
