"""A repeated empty fetch parks on its snapshot's partitions through one future the snapshot keeps
(fetch.py ``Snapshot.wait``): repeats do not park again while nothing changed, a wake that changed
nothing parks again without answering, a change answers at once, and the deadline answers with
whether the snapshot still holds. A released snapshot takes its future off the partitions."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from grete.broker.handlers.fetch import Snapshot
from grete.broker.replica.partition import Partition
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log

TOPIC_ID = uuid.uuid4()


def _partitions(tmp_path: Path, count: int = 3) -> list[Partition]:
    return [Partition("t", i, TOPIC_ID, Log.open(tmp_path / f"t-{i}", LogConfig(), topic_id=TOPIC_ID,
                                                 clean_shutdown=True), 0) for i in range(count)]


def _snapshot(partitions: list[Partition]) -> Snapshot:
    broker: Any = SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions})
    return Snapshot(broker, partitions, 12, None)  # type: ignore[arg-type]


def _parked(partition: Partition) -> list[asyncio.Future[None]]:
    return [f for f in partition._parked.consumers if not f.done()]


def test_repeats_share_one_parked_future_until_a_change(tmp_path: Path) -> None:
    async def run() -> None:
        partitions = _partitions(tmp_path)
        snapshot = _snapshot(partitions)
        answers: list[bool] = []
        for _ in range(3):  # three repeats, one after the other, each to its deadline
            snapshot.wait(20, lambda unchanged, deadline: answers.append(unchanged))
            assert all(len(_parked(p)) == 1 for p in partitions)
            await asyncio.sleep(0.05)
        assert answers == [True, True, True]
        assert all(len(p._parked.consumers) == 1 for p in partitions)  # parked once, not once per repeat
        snapshot.release()
        assert all(not _parked(p) for p in partitions)

    asyncio.run(run())


def test_a_wake_without_a_change_waits_on_and_a_change_answers_at_once(tmp_path: Path) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        partitions = _partitions(tmp_path)
        snapshot = _snapshot(partitions)
        answers: list[tuple[bool, float]] = []
        snapshot.wait(300, lambda unchanged, deadline: answers.append((unchanged, loop.time())))
        await asyncio.sleep(0.02)
        partitions[1].wake()  # nothing it depends on moved: parks again
        await asyncio.sleep(0.02)
        assert answers == [] and all(len(_parked(p)) == 1 for p in partitions)
        started = loop.time()
        partitions[2].go_offline()  # a change: answered now, not at the deadline
        await asyncio.sleep(0.02)
        assert [unchanged for unchanged, _ in answers] == [False]
        assert answers[0][1] - started < 0.1

    asyncio.run(run())


def test_a_released_snapshot_keeps_its_future_for_a_waiting_repeat_then_drops_it(tmp_path: Path) -> None:
    async def run() -> None:
        partitions = _partitions(tmp_path)
        snapshot = _snapshot(partitions)
        answers: list[bool] = []
        snapshot.wait(30, lambda unchanged, deadline: answers.append(unchanged))
        snapshot.release()  # the connection forgot the memo while a repeat still waits on it
        assert all(len(_parked(p)) == 1 for p in partitions)
        await asyncio.sleep(0.06)
        assert answers == [True]
        assert all(not _parked(p) for p in partitions)

    asyncio.run(run())


def test_a_change_no_partition_wakes_for_still_shows_at_the_deadline(tmp_path: Path) -> None:
    """A value the parked future is not woken for (here the log start, moved as retention moves it,
    without a wake) is still compared at the deadline: the repeat is not answered from the memo."""
    async def run() -> None:
        partitions = _partitions(tmp_path)
        snapshot = _snapshot(partitions)
        answers: list[bool] = []
        snapshot.wait(30, lambda unchanged, deadline: answers.append(unchanged))
        partitions[0]._log.log_start_offset = 5
        await asyncio.sleep(0.06)
        assert answers == [False]

    asyncio.run(run())


def test_parked_only_while_the_watch_has_seen_no_wake_since_the_values_were_compared(tmp_path: Path) -> None:
    async def run() -> None:
        partitions = _partitions(tmp_path)
        snapshot = _snapshot(partitions)
        assert not snapshot.parked()  # never compared since it was read: the first repeat compares
        answers: list[bool] = []
        snapshot.wait(20, lambda unchanged, deadline: answers.append(unchanged))
        await asyncio.sleep(0.05)
        assert answers == [True] and snapshot.parked()
        partitions[0].go_offline()  # a wake: not parked from here, not even before its callback runs
        assert not snapshot.parked()
        await asyncio.sleep(0)
        assert not snapshot.parked()
        committed = Snapshot(SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions}),  # type: ignore[arg-type]
                             partitions, 12, None, committed=True)  # type: ignore[arg-type]
        committed.wait(20, lambda unchanged, deadline: None)
        assert committed.parked()  # read_committed, no open transaction: as read_uncommitted
        partitions[1].append(RecordBatch(build_batch([Record(0, 0, None, b"v")])), 0)  # high watermark 1
        partitions[1]._log.producer_state.ongoing[0] = 77  # a transaction open below it, from offset 0
        open_txn = Snapshot(SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions[1:]}),  # type: ignore[arg-type]
                            partitions[1:], 12, None, committed=True)  # type: ignore[arg-type]
        open_txn.wait(20, lambda unchanged, deadline: None)
        assert not open_txn.parked()  # its repeats compare on arrival

    asyncio.run(run())
