"""A follower's incremental fetch (KIP-227) on its leader: a session partition with nothing new is not
read, yet the follower's fetch state moves as on a read (its caught-up time keeps it in the ISR), and
whatever the follower must hear (records, a high watermark its own fetch moved) still reaches it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grete.broker.handlers import fetch as fetch_handler
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.replica import fetch_sessions as sessions
from grete.broker.replica.partition import Partition
from grete.broker.requests.context import Later
from grete.protocol.messages import FetchRequest, FetchResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log
from tests.broker._calls import counted

VERSION = 12
TOPIC_ID = uuid.uuid4()


class Broker(SimpleNamespace):
    """What the Fetch handler asks of a broker, for one leader partition ``t-0``."""

    def __init__(self, partition: Partition) -> None:
        super().__init__(quorum=None, authorizer=None, fetch_sessions=sessions.FetchSessionCache(1000),
                         metrics=BrokerMetrics(), partitions={("t", 0): partition}, clock=[1000],
                         replicas=SimpleNamespace(leader_quota=None))

    def now_ms(self) -> int:
        return int(self.clock[0])

    def topic_name_for(self, topic_id: uuid.UUID) -> str | None:
        return "t" if topic_id == TOPIC_ID else None

    def partition(self, topic: str, index: int) -> Partition:
        return self.partitions[(topic, index)]


def _leading(tmp_path: Path) -> tuple[Partition, Broker]:
    """Partition t-0 led by broker 1, replicas 1-3 all in sync, on a broker of its own."""
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    partition = Partition("t", 0, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=1)
    partition.make_leader(0, 0, 1, (1, 2, 3), [1, 2, 3], now_ms=1000)
    return partition, Broker(partition)


def _fetch(broker: Broker, replica: int, offset: int | None, session_id: int = 0, epoch: int = 0) -> FetchResponse:
    named = [] if offset is None else [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=0)])]
    request = FetchRequest(replica_id=replica, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           session_id=session_id, session_epoch=epoch, topics=named)
    ctx: Any = SimpleNamespace(broker=broker, version=VERSION, api_version=VERSION,
                               session=SimpleNamespace(principal="User:broker", client_host="127.0.0.1"))
    response = fetch_handler.handle(ctx, request)
    assert isinstance(response, FetchResponse)
    return response


@pytest.fixture
def reads(monkeypatch):
    return counted(monkeypatch, fetch_handler, "_read_for_follower")


def test_an_idle_session_partition_is_not_read_but_the_follower_state_moves(tmp_path: Path, reads) -> None:
    asyncio.run(_idle_partition(tmp_path, reads))


async def _idle_partition(tmp_path: Path, reads: list[int]) -> None:
    partition, broker = _leading(tmp_path)
    full = _fetch(broker, 2, 0)                                    # opens follower 2's session
    session = full.session_id
    assert session and reads[0] == 1
    _fetch(broker, 3, 0)
    reads[0] = 0

    broker.clock[0] = 5000
    idle = _fetch(broker, 2, None, session, 1)
    assert idle.error_code == 0 and idle.responses == []
    assert reads[0] == 0, "an idle session partition was read"
    follower = partition._followers[2]
    assert follower.last_fetch_ms == 5000 and follower.last_caught_up_ms == 5000

    partition.append(RecordBatch(build_batch([Record(0, 0, None, b"v")])), 5000)
    news = _fetch(broker, 2, None, session, 2)                     # records at the offset it asks for
    assert [p.records.size > 0 for t in news.responses for p in t.partitions] == [True]
    _fetch(broker, 3, 1)                                           # follower 3 has it: 2 holds the HW back
    assert partition.high_watermark == 0
    moved = _fetch(broker, 2, 1, session, 3)                       # 2's own fetch moves it: 2 must hear
    assert [p.high_watermark for t in moved.responses for p in t.partitions] == [1]
    assert _fetch(broker, 2, None, session, 4).responses == []
    assert reads[0] == 3  # the append, follower 3's full fetch, the moved high watermark


def test_a_parked_follower_fetch_moves_the_fetch_state_on_arrival_only(tmp_path: Path) -> None:
    """Kafka reads a parked follower fetch again when it completes, but with
    ``updateFetchState = !readFromPurgatory``: the follower's fetch state (its caught-up time) is the
    one of its arrival. The answer settles from the fetch's own timer, through a Later."""
    async def run() -> None:
        partition, broker = _leading(tmp_path)
        session = _fetch(broker, 2, 0).session_id
        broker.clock[0] = 5000
        request = FetchRequest(replica_id=2, max_wait_ms=30, min_bytes=1, max_bytes=1 << 20,
                               session_id=session, session_epoch=1, topics=[])
        ctx: Any = SimpleNamespace(broker=broker, version=VERSION, api_version=VERSION)
        pending = fetch_handler.handle(ctx, request)
        assert isinstance(pending, Later)
        follower = partition._followers[2]
        assert follower.last_fetch_ms == 5000 and follower.last_caught_up_ms == 5000
        broker.clock[0] = 9000
        answered: list[Any] = []
        pending.then(lambda response, error: answered.append((response, error)))
        await asyncio.sleep(0.08)
        [(response, error)] = answered
        assert error is None and response.error_code == 0 and response.responses == []
        assert follower.last_fetch_ms == 5000 and follower.last_caught_up_ms == 5000

    asyncio.run(run())


def test_a_quiet_follower_fetch_is_not_read_again_at_its_deadline_unless_something_moved(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """Every partition quiet on arrival and no wake while parked: only the high watermark and the
    log start can have moved without one (another follower's fetch, retention); they are compared,
    and the partitions are read again only if one of them did."""
    quiet_reads = counted(monkeypatch, fetch_handler, "_read")

    async def run() -> None:
        partition, broker = _leading(tmp_path)
        session = _fetch(broker, 2, 0).session_id
        ctx: Any = SimpleNamespace(broker=broker, version=VERSION, api_version=VERSION)

        async def poll(epoch: int) -> FetchResponse:
            request = FetchRequest(replica_id=2, max_wait_ms=30, min_bytes=1, max_bytes=1 << 20,
                                   session_id=session, session_epoch=epoch, topics=[])
            pending = fetch_handler.handle(ctx, request)
            assert isinstance(pending, Later)
            return await pending

        quiet_reads[0] = 0
        assert (await poll(1)).responses == []
        assert quiet_reads[0] == 1  # on arrival only

        partition.append(RecordBatch(build_batch([Record(0, 0, None, b"v")])), 5000)
        _fetch(broker, 3, 1)  # follower 3 has it; 2 holds the high watermark back
        news = _fetch(broker, 2, None, session, 2)  # the records, at once
        assert [p.records.size > 0 for t in news.responses for p in t.partitions] == [True]
        _fetch(broker, 2, 1, session, 3)  # 2 has them: the high watermark moves to 1, and 2 is told
        assert partition.high_watermark == 1

        quiet_reads[0] = 0
        request = FetchRequest(replica_id=2, max_wait_ms=30, min_bytes=1, max_bytes=1 << 20,
                               session_id=session, session_epoch=4, topics=[])
        pending = fetch_handler.handle(ctx, request)
        assert isinstance(pending, Later)
        partition._log.log_start_offset = 1  # as retention moves it: no wake
        answer = await pending
        assert quiet_reads[0] == 2  # read again at the deadline
        assert [p.log_start_offset for t in answer.responses for p in t.partitions] == [1]

    asyncio.run(run())


class Authorizer:
    """Allows ``allowed`` principals everything; counts what it is asked."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, Any, Any, str]] = []

    def authorize(self, principal: str, host: str, operation: Any, resource_type: Any, name: str) -> bool:
        self.asked.append((principal, operation, resource_type, name))
        return principal in self.allowed


def test_with_an_authorizer_a_replica_is_asked_for_once_and_its_idle_partitions_are_not_read(
        tmp_path: Path, reads) -> None:
    asyncio.run(_authorized(tmp_path, reads))


async def _authorized(tmp_path: Path, reads: list[int]) -> None:
    partition, broker = _leading(tmp_path)
    broker.authorizer = Authorizer({"User:broker"})
    session = _fetch(broker, 2, 0).session_id
    assert session and reads[0] == 1 and len(broker.authorizer.asked) == 1  # CLUSTER_ACTION, once
    reads[0] = 0
    idle = _fetch(broker, 2, None, session, 1)
    assert idle.error_code == 0 and idle.responses == []
    assert reads[0] == 0, "an idle session partition was read under an authorizer"
    assert len(broker.authorizer.asked) == 2

    broker.authorizer.allowed = set()  # no longer CLUSTER_ACTION: every partition is refused, read or not
    refused = _fetch(broker, 2, None, session, 2)
    assert [p.error_code for t in refused.responses for p in t.partitions] == [29]  # TOPIC_AUTHORIZATION_FAILED


def test_a_consumer_naming_its_rack_keeps_idle_session_partitions_unread_without_a_rack_aware_selector(
        tmp_path: Path, monkeypatch) -> None:
    """A rack matters only with the rack-aware selector (it may send the consumer to a follower);
    with Kafka's default one an idle partition of a consumer's session is not read again."""
    consumer_reads = counted(monkeypatch, fetch_handler, "_read_partition")

    async def run() -> None:
        partition, broker = _leading(tmp_path)
        broker.replicas = SimpleNamespace(readable=lambda topic, index, from_follower: broker.partitions[(topic, index)])
        broker.config = SimpleNamespace(get_str=lambda key: "")  # replica.selector.class: Kafka's default
        ctx: Any = SimpleNamespace(broker=broker, version=VERSION, api_version=VERSION,
                                   session=SimpleNamespace(principal="User:ANONYMOUS", client_host="127.0.0.1"))

        def consume(session: int, epoch: int, named: bool) -> FetchResponse:
            topics = [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=0)])] if named else []
            request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, rack_id="rack-a",
                                   session_id=session, session_epoch=epoch, topics=topics)
            response = fetch_handler.handle(ctx, request)
            assert isinstance(response, FetchResponse)
            return response

        session = consume(0, 0, named=True).session_id
        assert session and consumer_reads[0] == 1
        assert consume(session, 1, named=False).responses == []
        assert consumer_reads[0] == 1, "an idle session partition was read for a consumer naming its rack"

    asyncio.run(run())


def test_under_an_authorizer_a_consumer_losing_read_is_refused_in_its_session(tmp_path: Path, monkeypatch) -> None:
    """An idle session partition is skipped only for a consumer still allowed to READ its topic
    (asked once per topic and request); once the right is gone the partition is read, and refused."""
    consumer_reads = counted(monkeypatch, fetch_handler, "_read_partition")

    async def run() -> None:
        _partition, broker = _leading(tmp_path)
        broker.replicas = SimpleNamespace(readable=lambda topic, index, from_follower: broker.partitions[(topic, index)])
        broker.config = SimpleNamespace(get_str=lambda key: "")
        broker.authorizer = Authorizer({"User:alice"})
        ctx: Any = SimpleNamespace(broker=broker, version=VERSION, api_version=VERSION,
                                   session=SimpleNamespace(principal="User:alice", client_host="127.0.0.1"))

        def consume(session: int, epoch: int, named: bool) -> FetchResponse:
            topics = [FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=0)])] if named else []
            response = fetch_handler.handle(ctx, FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                                                              max_bytes=1 << 20, session_id=session,
                                                              session_epoch=epoch, topics=topics))
            assert isinstance(response, FetchResponse)
            return response

        session = consume(0, 0, named=True).session_id
        assert session and consumer_reads[0] == 1
        assert consume(session, 1, named=False).responses == [] and consumer_reads[0] == 1  # skipped
        broker.authorizer.allowed = set()
        refused = consume(session, 2, named=False)
        assert [p.error_code for t in refused.responses for p in t.partitions] == [29]  # TOPIC_AUTHORIZATION_FAILED

    asyncio.run(run())
