"""An idle consumer that rotates the order of partitions in each Fetch (librdkafka does) is answered
from the connection's memo of its empty answer, in the order it asked, and still sees every change;
a parked fetch parks one future on all of its partitions."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest

from grete.broker.handlers import fetch as fetch_handler
from grete.broker.replica.parked_fetches import SWEEP_MIN, ParkedFetches
from grete.protocol.codec import Reader
from grete.protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from grete.protocol.records.record import Record, build_batch
from grete.testing._wire import Wire, _exact
from tests.broker._calls import counted

PARTITIONS = 3


def _request(topic: str, topic_id: uuid.UUID, order: list[int], *, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
                            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                            for p in order])])


def _raw(wire: Wire) -> bytes:
    """One response frame, size prefix stripped: correlation id first."""
    return _exact(wire.sock, struct.unpack(">i", _exact(wire.sock, 4))[0])


def _partitions(frame: bytes, version: int) -> list[FetchResponse.PartitionData]:
    r = Reader(frame)
    r.int32()
    if version >= 12:
        r.tagged_fields()  # a flexible response header
    return [p for t in FetchResponse.decode(r, version).responses for p in t.partitions]


def _produce(broker, topic: str, partition: int) -> None:
    batch = build_batch([Record(0, 0, None, b"news")])
    wire = Wire(broker.host, broker.port)
    try:
        response = wire.call(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])]),
            ProduceResponse, 9)
    finally:
        wire.close()
    assert response.responses[0].partition_responses[0].error_code == 0


@pytest.fixture
def reads(monkeypatch):
    """How many times the Fetch handler read its partitions."""
    return counted(monkeypatch, fetch_handler, "_read")


@pytest.fixture
def topic(grete_broker, topic_name) -> tuple[str, uuid.UUID]:
    grete_broker.create_topic(topic_name, PARTITIONS)
    return topic_name, grete_broker.broker.partitions[(topic_name, 0)].topic_id


@pytest.mark.parametrize("version", [4, 7, 11, 12, 16])
def test_a_rotated_repeat_is_answered_in_its_own_order_without_a_read_until_something_moves(
        grete_broker, topic, reads, version):
    name, topic_id = topic
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        wire.send(_request(name, topic_id, [0, 1, 2]), version)
        assert [p.partition_index for p in _partitions(_raw(wire), version)] == [0, 1, 2]
        assert reads[0] == 1
        for order in ([1, 2, 0], [2, 0, 1], [1, 2, 0]):
            wire.send(_request(name, topic_id, order), version)
            frame = _raw(wire)
            assert [p.partition_index for p in _partitions(frame, version)] == order
            fresh = Wire(grete_broker.host, grete_broker.port)  # the full path: a new connection
            try:
                fresh.send(_request(name, topic_id, order), version)
                assert _raw(fresh)[4:] == frame[4:]
            finally:
                fresh.close()
        assert reads[0] == 1 + 3, "a rotated repeat was read again"
        _produce(grete_broker, name, 1)
        wire.send(_request(name, topic_id, [2, 0, 1]), version)
        answer = _partitions(_raw(wire), version)
        assert [p.partition_index for p in answer] == [2, 0, 1]
        assert answer[2].high_watermark == 1 and answer[2].records
    finally:
        wire.close()


def test_a_parked_rotated_repeat_parks_one_future_and_wakes_on_an_append_to_any_partition(grete_broker, topic):
    name, topic_id = topic
    version = 12
    parts = [grete_broker.broker.partitions[(name, p)] for p in range(PARTITIONS)]
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        wire.send(_request(name, topic_id, [0, 1, 2]), version)  # wait 0: the memo
        assert not any(p.records for p in _partitions(_raw(wire), version))
        wire.send(_request(name, topic_id, [1, 2, 0], max_wait_ms=10_000), version)
        sent = time.monotonic()
        parked = _await(grete_broker, lambda: [[f for f in p._parked.consumers if not f.done()] for p in parts])
        assert len({id(f) for futures in parked for f in futures}) == 1, parked
        _produce(grete_broker, name, 2)
        answer = _partitions(_raw(wire), version)
        assert time.monotonic() - sent < 5, "the parked repeat was not woken by the append"
        assert [p.partition_index for p in answer] == [1, 2, 0]
        assert answer[1].high_watermark == 1 and answer[1].records
    finally:
        wire.close()


def _await(broker, probe):
    """The broker-side value of ``probe`` once every partition has a parked fetch."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        value = broker.call(probe)
        if all(value):
            return value
        time.sleep(0.01)
    raise AssertionError("no fetch parked on every partition")


def test_futures_answered_elsewhere_do_not_pile_up_on_an_idle_partition() -> None:
    async def run() -> int:
        parked = ParkedFetches()
        live = asyncio.get_running_loop().create_future()
        parked.park(False, live)
        for _ in range(1000):  # fetches answered at their max wait, never taking their future back
            future = parked.park(False, asyncio.get_running_loop().create_future())
            future.cancel()
        assert live in parked.consumers
        return len(parked.consumers)

    assert asyncio.run(run()) <= 2 * SWEEP_MIN
