"""queued.max.request.bytes on the wire (KIP-72): a request's whole size is reserved when its size is
read, any request is admitted while some memory is left, and connections wait only while the pool is
exhausted, each for its turn. Nothing deadlocks, no connection starves, and a client that goes away
returns what it held."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from grete.protocol.codec import Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ProduceRequest,
    ProduceResponse,
    request_header_version,
)
from grete.testing._wire import Wire

MiB = 1 << 20
PRODUCE_VERSION = 9


def _produce_frame(records: int, correlation_id: int = 1) -> bytes:
    """A Produce request carrying ``records`` bytes, to a topic that does not exist: the broker reads it
    whole and answers UNKNOWN_TOPIC_OR_PARTITION."""
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="no-such-topic", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"x" * records)])])
    return _frame(request, PRODUCE_VERSION, correlation_id)


def _frame(request, version: int, correlation_id: int = 1) -> bytes:  # noqa: ANN001
    w = Writer()
    size = w.reserve_int32()
    encode_request_header(w, RequestHeader(api_key=request.API_KEY, api_version=version,
                                           correlation_id=correlation_id, client_id="memory"),
                          request_header_version(request.API_KEY, version))
    request.encode(w, version)
    w.patch_int32(size, w.nbytes - 4)
    return w.getvalue()


def _answered(wire: Wire) -> int:
    response = wire.receive(ProduceResponse, PRODUCE_VERSION)
    return int(response.responses[0].partition_responses[0].error_code)


def _pool(b):  # noqa: ANN001, ANN202
    return b.broker.memory_pool


class _Reservations:
    """The pool's reservations by frame size and outcome, counted on the broker's loop (the test
    waits for a count), and the sizes of the frames whose memory came back, in order (each once
    the frame was handled)."""

    def __init__(self, running) -> None:  # noqa: ANN001
        pool = _pool(running)
        self._counts: Counter[tuple[int, bool]] = Counter()
        self._changed = threading.Condition()
        self.released: list[int] = []
        reserve: Callable[[int], bool] = pool.try_reserve
        release: Callable[[int], None] = pool.release

        def reserving(size: int) -> bool:
            ok = reserve(size)
            with self._changed:
                self._counts[size, ok] += 1
                self._changed.notify_all()
            return ok

        def releasing(size: int) -> None:
            self.released.append(size)
            release(size)

        def watch() -> None:
            pool.try_reserve = reserving
            pool.release = releasing

        running.call(watch)

    def wait(self, frame: bytes, admitted: bool, count: int = 1) -> bool:
        """Until ``count`` frames the size of ``frame`` were admitted (or refused: the pool used up)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._counts[len(frame) - 4, admitted] >= count, 10)


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


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": str(MiB)})
def test_a_small_request_refused_for_memory_is_served_after_the_large_ones_ahead_of_it(grete_broker):
    # Three 2 MiB requests hold and queue for a 1 MiB pool, then an ApiVersions request arrives on a
    # fresh connection whose client sends nothing more until answered: once the large ones ahead of
    # it are handled its turn comes, from the bytes the broker already holds (none more will come).
    frames = [_produce_frame(2 * MiB, correlation_id=i) for i in range(3)]
    small = _frame(ApiVersionsRequest(), 0)
    head = 64 * 1024
    reservations = _Reservations(grete_broker)
    bigs = [Wire(grete_broker.host, grete_broker.port, timeout=10) for _ in frames]
    other = Wire(grete_broker.host, grete_broker.port, timeout=10)
    try:
        bigs[0].sock.sendall(frames[0][:head])
        assert reservations.wait(frames[0], admitted=True)
        for queued, (wire, frame) in enumerate(zip(bigs[1:], frames[1:], strict=True), 1):
            wire.sock.sendall(frame[:head])
            assert reservations.wait(frame, admitted=False, count=queued)
        other.sock.sendall(small)
        assert reservations.wait(small, admitted=False)
        with ThreadPoolExecutor(len(bigs)) as senders:
            for wire, frame in zip(bigs, frames, strict=True):
                senders.submit(wire.sock.sendall, frame[head:])
            assert other.receive(ApiVersionsResponse, 0).error_code == 0
            assert [_answered(wire) for wire in bigs] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 3
    finally:
        for wire in (*bigs, other):
            wire.close()
    assert grete_broker.call(lambda: _pool(grete_broker).used) == 0


@pytest.mark.grete_overrides(**{"queued.max.request.bytes": str(32 * 1024)})
def test_a_connection_releasing_memory_cannot_take_it_back_ahead_of_those_waiting(grete_broker):
    # A large request holds the 32 KB pool; behind it queue a pipelined stream of 40 KB requests
    # (each uses the pool up, and the next one's size is already read when the last one's memory
    # comes back), then another connection's 20 KB request. The stream must not take the memory it
    # returns back ahead of the one waiting: that request is handled after a frame or two of the
    # stream, not once the stream runs dry.
    blocker, stream, own = _produce_frame(2 * MiB), _produce_frame(40 * 1024), _produce_frame(20 * 1024)
    count, head = 200, 64 * 1024
    reservations = _Reservations(grete_broker)
    wires = [Wire(grete_broker.host, grete_broker.port, timeout=30) for _ in range(3)]
    holding, flooding, other = wires
    try:
        holding.sock.sendall(blocker[:head])
        assert reservations.wait(blocker, admitted=True)
        with ThreadPoolExecutor(2) as workers:
            sent = workers.submit(flooding.sock.sendall, stream * count)
            answers = workers.submit(lambda: [_answered(flooding) for _ in range(count)])
            assert reservations.wait(stream, admitted=False)
            other.sock.sendall(own)
            assert reservations.wait(own, admitted=False)
            holding.sock.sendall(blocker[head:])
            assert _answered(holding) == _answered(other) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            sent.result(60)
            assert set(answers.result(60)) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    finally:
        for wire in wires:
            wire.close()
    released = reservations.released
    ahead = released[released.index(len(blocker) - 4):released.index(len(own) - 4)]
    assert ahead.count(len(stream) - 4) <= 2, f"{ahead.count(len(stream) - 4)} of the stream's requests went first"
    assert grete_broker.call(lambda: _pool(grete_broker).used) == 0
