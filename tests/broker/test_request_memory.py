"""queued.max.request.bytes on the wire (KIP-72): a request's whole size is reserved when its size is
read, any request is admitted while some memory is left, and connections wait only while the pool is
exhausted. Nothing deadlocks, and a client that goes away returns what it held."""

from __future__ import annotations

import socket
import threading

import pytest

from grete.protocol.codec import Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, ProduceRequest, ProduceResponse
from grete.testing._wire import Wire

MiB = 1 << 20
PRODUCE_VERSION = 9


def _produce_frame(records: int, correlation_id: int = 1) -> bytes:
    """A Produce request carrying ``records`` bytes, to a topic that does not exist: the broker reads it
    whole and answers UNKNOWN_TOPIC_OR_PARTITION."""
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="no-such-topic", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"x" * records)])])
    w = Writer()
    size = w.reserve_int32()
    encode_request_header(w, RequestHeader(api_key=0, api_version=PRODUCE_VERSION, correlation_id=correlation_id,
                                           client_id="memory"), 2)
    request.encode(w, PRODUCE_VERSION)
    w.patch_int32(size, w.nbytes - 4)
    return w.getvalue()


def _answered(wire: Wire) -> int:
    response = wire.receive(ProduceResponse, PRODUCE_VERSION)
    return int(response.responses[0].partition_responses[0].error_code)


def _pool(b):  # noqa: ANN001, ANN202
    return b.broker.memory_pool


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": str(4 * MiB)})
def test_two_requests_larger_than_half_the_pool_both_complete(grete_broker):
    # Each client sends 1.5 MiB of a 3 MiB request before either sends the rest: reserving as bytes
    # arrive, each would hold about 2 MiB of the 4 MiB and wait for the other for ever.
    frames = [_produce_frame(3 * MiB, correlation_id=i) for i in (1, 2)]
    wires = [Wire(grete_broker.host, grete_broker.port, timeout=10) for _ in frames]
    try:
        for wire, frame in zip(wires, frames, strict=True):
            wire.sock.sendall(frame[:3 * MiB // 2])
        for wire, frame in zip(wires, frames, strict=True):
            wire.sock.sendall(frame[3 * MiB // 2:])
        assert [_answered(wire) for wire in wires] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    finally:
        for wire in wires:
            wire.close()
    assert grete_broker.call(lambda: _pool(grete_broker).used) == 0


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": str(MiB)})
def test_a_request_larger_than_the_pool_is_admitted_when_the_pool_is_untouched(grete_broker):
    wire = Wire(grete_broker.host, grete_broker.port, timeout=10)
    try:
        wire.sock.sendall(_produce_frame(3 * MiB))
        assert _answered(wire) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # and the connection goes on
        assert wire.call(ApiVersionsRequest(), ApiVersionsResponse, 0).error_code == 0
    finally:
        wire.close()


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": "2048"})
def test_many_small_requests_from_many_connections_under_a_tiny_pool(grete_broker):
    # A pool that admits a request or two at a time: every connection waits its turn, none for ever.
    def pipelined(wire: Wire, count: int, out: list[int]) -> None:
        frames = b"".join(_produce_frame(700, correlation_id=i) for i in range(count))
        wire.sock.sendall(frames)
        out.extend(_answered(wire) for _ in range(count))

    wires = [Wire(grete_broker.host, grete_broker.port, timeout=10) for _ in range(8)]
    results: list[list[int]] = [[] for _ in wires]
    threads = [threading.Thread(target=pipelined, args=(wire, 150, out)) for wire, out in zip(wires, results, strict=True)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for wire in wires:
            wire.close()
    assert [len(r) for r in results] == [150] * len(wires)
    assert {code for r in results for code in r} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert grete_broker.call(lambda: _pool(grete_broker).used) == 0


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": str(MiB)})
def test_clients_that_go_away_mid_request_return_their_memory(grete_broker):
    # Each sends 2.5 MiB of a 3 MiB request and stops writing. Reserving as bytes arrived, the first
    # would stop reading at the 1 MiB bound, never see the end of the stream (CLOSE-WAIT) and hold
    # the pool for ever. Now the first is admitted whole and the second waits for its memory.
    socks = [socket.create_connection((grete_broker.host, grete_broker.port), timeout=10) for _ in range(2)]
    try:
        for sock in socks:
            sock.sendall(_produce_frame(3 * MiB)[:5 * MiB // 2])
            sock.shutdown(socket.SHUT_WR)
        for sock in socks:
            assert sock.recv(1) == b""  # the broker read to the end of the stream and closed its side
    finally:
        for sock in socks:
            sock.close()
    pool = grete_broker.call(lambda: (_pool(grete_broker).used, len(grete_broker.broker.connections)))
    assert pool == (0, 0)
