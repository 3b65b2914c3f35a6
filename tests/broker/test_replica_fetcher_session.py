"""A follower's fetcher keeps a fetch session with its leader (KIP-227, as Kafka's replica fetchers do):
after the first full fetch, a fetch names only the partitions whose fetch position moved and the ones
it no longer follows, and any failure starts over with a full fetch. The leader is a stand-in that
records each request and answers what the test tells it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from grete.broker.cluster.fetcher import ReplicaFetcher
from grete.broker.config import BrokerConfig
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.replica.partition import Partition
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import FetchRequest, FetchResponse
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log

TOPIC_ID = uuid.uuid4()


class Leader:
    """Stands in for the fetcher's PeerConnection: each call is recorded and waits for its answer."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[FetchRequest] = asyncio.Queue()
        self.answers: asyncio.Queue[FetchResponse] = asyncio.Queue()

    async def call(self, request: FetchRequest, version: int) -> Any:
        await self.requests.put(request)
        return await self.answers.get()

    def close(self) -> None:
        pass


def follower(tmp_path: Path, index: int) -> Partition:
    log = Log.open(tmp_path / f"t-{index}", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    partition = Partition("t", index, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=2)
    partition.make_follower(0, 0, 1, (1, 2))
    return partition


def answer(session_id: int, records: dict[int, bytes], error: ErrorCode = ErrorCode.NONE) -> FetchResponse:
    parts = [FetchResponse.PartitionData(partition_index=i, error_code=0, high_watermark=0, last_stable_offset=0,
                                         log_start_offset=0, records=data) for i, data in records.items()]
    return FetchResponse(error_code=error, session_id=session_id,
                         responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=parts)] if parts else [])


def named(request: FetchRequest) -> dict[int, int]:
    """partition -> fetch offset, of the partitions a request names."""
    return {p.partition: p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request: FetchRequest) -> list[int]:
    return [i for t in request.forgotten_topics_data for i in t.partitions]


async def fetching(tmp_path: Path) -> tuple[ReplicaFetcher, Leader, list[Partition]]:
    fetcher = ReplicaFetcher(1, "127.0.0.1", 0, 2, BrokerConfig({"replica.fetch.backoff.ms": "10"}),
                             BrokerMetrics(), lambda: None)
    leader = Leader()
    fetcher.peer = leader  # type: ignore[assignment]
    partitions = [follower(tmp_path, i) for i in range(3)]
    for p in partitions:
        fetcher.add(p)
    fetcher.task = asyncio.ensure_future(fetcher._run())
    return fetcher, leader, partitions


async def next_request(leader: Leader) -> FetchRequest:
    return await asyncio.wait_for(leader.requests.get(), 5)


def test_an_idle_follower_fetch_names_no_partition(tmp_path: Path) -> None:
    asyncio.run(_idle(tmp_path))


async def _idle(tmp_path: Path) -> None:
    fetcher, leader, _ = await fetching(tmp_path)
    first = await next_request(leader)
    assert (first.session_id, first.session_epoch) == (0, 0)  # full, asking for a session
    assert named(first) == {0: 0, 1: 0, 2: 0}
    await leader.answers.put(answer(7, {0: b"", 1: b"", 2: b""}))
    for epoch in (1, 2):
        request = await next_request(leader)
        assert (request.session_id, request.session_epoch) == (7, epoch)
        assert named(request) == {} and forgotten(request) == []
        await leader.answers.put(answer(7, {}))
    fetcher.stop()


def test_a_moved_partition_is_named_and_a_dropped_one_forgotten(tmp_path: Path) -> None:
    asyncio.run(_moved(tmp_path))


async def _moved(tmp_path: Path) -> None:
    fetcher, leader, _ = await fetching(tmp_path)
    await next_request(leader)
    fetcher.remove(("t", 2))
    await leader.answers.put(answer(7, {0: bytes(build_batch([Record(0, 0, None, b"v")])), 1: b"", 2: b""}))
    request = await next_request(leader)
    assert (request.session_id, request.session_epoch) == (7, 1)
    assert named(request) == {0: 1} and forgotten(request) == [2]
    fetcher.stop()


def test_a_lost_session_starts_over_with_a_full_fetch(tmp_path: Path) -> None:
    asyncio.run(_lost(tmp_path))


async def _lost(tmp_path: Path) -> None:
    fetcher, leader, _ = await fetching(tmp_path)
    await next_request(leader)
    await leader.answers.put(answer(7, {0: b"", 1: b"", 2: b""}))
    await next_request(leader)
    await leader.answers.put(answer(0, {}, ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    request = await next_request(leader)
    assert (request.session_id, request.session_epoch) == (7, 0)  # closes the old session, asks anew
    assert named(request) == {0: 0, 1: 0, 2: 0}
    await leader.answers.put(answer(0, {0: b"", 1: b"", 2: b""}))  # the leader keeps no session
    request = await next_request(leader)
    assert (request.session_id, request.session_epoch) == (0, 0) and len(named(request)) == 3
    fetcher.stop()
