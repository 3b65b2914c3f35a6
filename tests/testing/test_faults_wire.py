"""Fault injection seen on the wire, with grete's own codecs as the client: exact error codes,
exact shapes, which partitions were appended and which were not, and response order."""

from __future__ import annotations

import time
from typing import Any

import pytest

from grete.broker.requests.registry import handlers
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    APIS,
    HeartbeatRequest,
    HeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch
from grete.protocol.shapes import error_response
from grete.testing import RunningBroker
from grete.testing._wire import Wire

PRODUCE_V = 9


def _produce(topic: str, partitions: list[int], value: bytes = b"v", acks: int = -1) -> ProduceRequest:
    batch = build_batch([Record(0, 0, None, value)])
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=batch)
                                    for p in partitions])])


def _errors(response: ProduceResponse) -> dict[tuple[str, int], int]:
    return {(t.name, p.index): p.error_code for t in response.responses for p in t.partition_responses}


def _end_offsets(b: RunningBroker, topic: str, count: int) -> list[int]:
    return b.call(lambda: [b.broker.partition(topic, p).log_end_offset for p in range(count)])


@pytest.fixture
def wire(grete_broker: RunningBroker) -> Any:
    client = Wire(grete_broker.host, grete_broker.port)
    yield client
    client.close()


def test_fail_answers_every_partition_and_appends_nothing(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 3)
    with grete_broker.faults.fail("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, times=1) as fault:
        response = wire.call(_produce("t", [0, 1, 2]), ProduceResponse, PRODUCE_V)
        assert fault.hits == 1
    assert _errors(response) == {("t", p): ErrorCode.NOT_LEADER_OR_FOLLOWER for p in range(3)}
    assert all(p.base_offset == -1 for t in response.responses for p in t.partition_responses)
    assert _end_offsets(grete_broker, "t", 3) == [0, 0, 0]
    # times=1: the next request is processed normally
    again = wire.call(_produce("t", [0, 1, 2]), ProduceResponse, PRODUCE_V)
    assert set(_errors(again).values()) == {0}
    assert _end_offsets(grete_broker, "t", 3) == [1, 1, 1]


def test_partition_filter_fails_only_that_partition(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 3)
    grete_broker.create_topic("u", 1)
    request = _produce("t", [0, 1, 2])
    request.topic_data += _produce("u", [0]).topic_data
    with grete_broker.faults.fail(0, ErrorCode.NOT_ENOUGH_REPLICAS, topic="t", partition=1):
        response = wire.call(request, ProduceResponse, PRODUCE_V)
    assert _errors(response) == {("t", 0): 0, ("t", 1): ErrorCode.NOT_ENOUGH_REPLICAS, ("t", 2): 0, ("u", 0): 0}
    assert _end_offsets(grete_broker, "t", 3) == [1, 0, 1]
    assert _end_offsets(grete_broker, "u", 1) == [1]


def test_topic_filter_does_not_touch_requests_for_other_topics(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 1)
    grete_broker.create_topic("other", 1)
    with grete_broker.faults.fail("produce", "NOT_LEADER_OR_FOLLOWER", topic="t") as fault:
        response = wire.call(_produce("other", [0]), ProduceResponse, PRODUCE_V)
        assert _errors(response) == {("other", 0): 0}
        assert fault.hits == 0
        assert _errors(wire.call(_produce("t", [0]), ProduceResponse, PRODUCE_V)) == {
            ("t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert fault.hits == 1


def test_request_level_api_gets_its_top_level_error(grete_broker: RunningBroker, wire: Wire) -> None:
    with grete_broker.faults.fail("Heartbeat", ErrorCode.REBALANCE_IN_PROGRESS, times=1):
        response = wire.call(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), HeartbeatResponse, 4)
    assert response.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_metadata_topic_errors_mirror_the_request(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 2)
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                              allow_auto_topic_creation=False)
    with grete_broker.faults.fail("Metadata", ErrorCode.LEADER_NOT_AVAILABLE, times=1):
        failed = wire.call(request, MetadataResponse, 9)
    assert [(t.name, t.error_code) for t in failed.topics] == [("t", ErrorCode.LEADER_NOT_AVAILABLE)]
    healthy = wire.call(request, MetadataResponse, 9)
    assert [(t.name, t.error_code, len(t.partitions)) for t in healthy.topics] == [("t", 0, 2)]


def test_while_predicate_ends_the_fault(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 1)
    budget = [2]

    def still_failing() -> bool:
        budget[0] -= 1
        return budget[0] >= 0

    fault = grete_broker.faults.fail("Produce", ErrorCode.REQUEST_TIMED_OUT, while_=still_failing)
    codes = [_errors(wire.call(_produce("t", [0]), ProduceResponse, PRODUCE_V))[("t", 0)] for _ in range(4)]
    assert codes == [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT, 0, 0]
    assert fault.hits == 2
    assert grete_broker.broker.faults is None  # the expired rule uninstalled the seam


def test_close_on_closes_without_processing(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 1)
    fault = grete_broker.faults.close_on("Produce")
    with pytest.raises(ConnectionError):
        wire.call(_produce("t", [0]), ProduceResponse, PRODUCE_V)
    assert fault.hits == 1
    assert _end_offsets(grete_broker, "t", 1) == [0]
    fresh = Wire(grete_broker.host, grete_broker.port)
    try:  # times=1 by default: a reconnecting client gets through
        assert _errors(fresh.call(_produce("t", [0]), ProduceResponse, PRODUCE_V)) == {("t", 0): 0}
    finally:
        fresh.close()


def test_acks0_produce_failure_closes_the_connection(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 1)
    with grete_broker.faults.fail("Produce", times=1) as fault:
        wire.send(_produce("t", [0], acks=0), PRODUCE_V)
        fault.wait(1)
    with pytest.raises(ConnectionError):
        wire.call(_produce("t", [0]), ProduceResponse, PRODUCE_V)


def test_delay_keeps_the_connection_order(grete_broker: RunningBroker, wire: Wire) -> None:
    """A delayed produce must not be overtaken by the next one pipelined on the same connection."""
    grete_broker.create_topic("t", 1)
    with grete_broker.faults.delay("Produce", 0.2, times=1):
        started = time.monotonic()
        wire.send(_produce("t", [0], b"first"), PRODUCE_V)
        wire.send(_produce("t", [0], b"second"), PRODUCE_V)
        first = wire.receive(ProduceResponse, PRODUCE_V)
        second = wire.receive(ProduceResponse, PRODUCE_V)
        elapsed = time.monotonic() - started
    assert elapsed >= 0.2
    assert [first.responses[0].partition_responses[0].base_offset,
            second.responses[0].partition_responses[0].base_offset] == [0, 1]
    values = grete_broker.call(lambda: [r.value for batch in grete_broker.broker.partition("t", 0).batches(0, 2)
                                        for r in _records(batch)])
    assert values == [b"first", b"second"]


def _records(batch: Any) -> list[Any]:
    from grete.protocol.records.record import decode_records
    return list(decode_records(batch))


def test_pause_holds_appends_until_resume(grete_broker: RunningBroker, wire: Wire) -> None:
    grete_broker.create_topic("t", 2)
    paused = grete_broker.faults.pause_partition("t", 0)
    wire.send(_produce("t", [0], b"held"), PRODUCE_V)
    paused.wait_held(1)
    other = Wire(grete_broker.host, grete_broker.port)
    try:  # other partitions are not affected
        assert _errors(other.call(_produce("t", [1]), ProduceResponse, PRODUCE_V)) == {("t", 1): 0}
    finally:
        other.close()
    wire.sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        wire.receive(ProduceResponse, PRODUCE_V)
    wire.sock.settimeout(10)
    assert _end_offsets(grete_broker, "t", 2) == [0, 1]
    paused.resume()
    assert _errors(wire.receive(ProduceResponse, PRODUCE_V)) == {("t", 0): 0}
    assert _end_offsets(grete_broker, "t", 2) == [1, 1]
    assert grete_broker.broker.faults is None


def test_misuse_fails_fast(grete_broker: RunningBroker) -> None:
    with pytest.raises(ValueError, match="unknown Kafka API 'Prodce'"):
        grete_broker.faults.fail("Prodce")
    with pytest.raises(ValueError, match="unknown Kafka error code"):
        grete_broker.faults.fail("Produce", "NOT_A_CODE")
    with pytest.raises(ValueError, match="times must be >= 1"):
        grete_broker.faults.fail("Produce", times=0)
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PARTITION"):
        grete_broker.faults.pause_partition("missing", 0)
    with pytest.raises(LookupError, match="no group 'nope'"):
        grete_broker.faults.expire_member("nope", "m")
    fault = grete_broker.faults.fail("Produce", times=1)
    with pytest.raises(TimeoutError, match="hit 0 time"):
        fault.wait(1, timeout=0.05)
    grete_broker.faults.clear()
    assert grete_broker.broker.faults is None


@pytest.mark.parametrize("api_key", sorted(handlers()))
def test_error_response_encodes_for_every_handled_api_and_version(api_key: int) -> None:
    """Every API the broker serves gets a decodable error response at every version it serves."""
    handler = handlers()[api_key]
    info = APIS[api_key]
    for version in range(handler.min_version, handler.max_version + 1):
        response = error_response(info.response, info.request(), version, ErrorCode.UNKNOWN_SERVER_ERROR)
        w = Writer()
        response.encode(w, version)
        decoded = info.response.decode(Reader(w.getvalue()), version)
        codes = [getattr(decoded, f.name) for f in info.response._FIELDS
                 if f.name.endswith("error_code") and version in f.versions]
        assert all(code == ErrorCode.UNKNOWN_SERVER_ERROR for code in codes), (info.name, version)


def test_filtered_fail_merges_into_a_long_polled_fetch(grete_broker: RunningBroker, wire: Wire) -> None:
    """The handler's answer arrives later (long poll); the failed partition is merged into it."""
    from grete.protocol.messages import FetchRequest, FetchResponse

    grete_broker.create_topic("t", 2)
    request = FetchRequest(replica_id=-1, max_wait_ms=150, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic="t", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
            for p in (0, 1)])])
    with grete_broker.faults.fail("Fetch", ErrorCode.NOT_LEADER_OR_FOLLOWER, topic="t", partition=1):
        started = time.monotonic()
        response = wire.call(request, FetchResponse, 11)
        assert time.monotonic() - started >= 0.1  # partition 0 really long-polled
    assert response.error_code == 0
    assert sorted((p.partition_index, p.error_code, p.high_watermark) for t in response.responses
                  for p in t.partitions) == [(0, 0, 0), (1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]
