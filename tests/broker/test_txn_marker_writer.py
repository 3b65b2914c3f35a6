"""The coordinator's marker writer in a cluster (Kafka's TransactionMarkerChannelManager) when a
partition's leadership has come to the coordinator's own broker: a marker that broker refuses for a
newer epoch (the producer's or the coordinator's) is given up, as a refusal from another broker is,
while a refusal worth retrying is tried again. The broker and its local writer are scripted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from grete.broker.broker import Broker
from grete.broker.cluster.markers import ClusterMarkerWriter
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test

TP = ("t", 0)
MARKER = (1000, 9, True, 0, 2)  # producer id, epoch, commit, coordinator epoch, transaction version


class _Broker:
    node_id = 1

    def __init__(self) -> None:
        leader_here = SimpleNamespace(partitions={0: SimpleNamespace(leader=1)})
        self.metadata = SimpleNamespace(topic=lambda name: leader_here if name == TP[0] else None)
        self.partitions = {TP: SimpleNamespace(is_leader=True)}


class _Local:
    """Refuses each marker with the next of ``refusals``; records every call."""

    def __init__(self, *refusals: ErrorCode) -> None:
        self.refusals = list(refusals)
        self.calls = 0

    def append_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: Any, *, transaction_version: int = 0,
                       refused: dict[tuple[str, int], ErrorCode] | None = None) -> list[Any]:
        self.calls += 1
        assert refused is not None
        for tp in partitions:
            refused[tp] = self.refusals[min(self.calls, len(self.refusals)) - 1]
        return []


async def _send(local: _Local) -> asyncio.Future[None]:
    writer = ClusterMarkerWriter(cast(Broker, _Broker()), local, "PLAINTEXT")
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    sending = asyncio.ensure_future(writer._send_until_written(MARKER, {TP}, done))
    try:
        await asyncio.wait_for(asyncio.shield(done), 1.0)
    finally:
        sending.cancel()
    return done


@async_test
async def test_a_marker_refused_for_a_newer_epoch_is_given_up() -> None:
    local = _Local(ErrorCode.INVALID_PRODUCER_EPOCH)
    assert (await _send(local)).done() and local.calls == 1


@async_test
async def test_a_marker_refused_for_a_fenced_coordinator_is_given_up() -> None:
    local = _Local(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    assert (await _send(local)).done() and local.calls == 1


@async_test
async def test_a_retriable_refusal_is_tried_again() -> None:
    local = _Local(ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.INVALID_PRODUCER_EPOCH)
    assert (await _send(local)).done() and local.calls == 2
