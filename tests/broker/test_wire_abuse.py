"""Bad input on the wire: the broker answers as Kafka does or closes that one connection, keeps
serving everyone else, and loses nothing it acknowledged."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import Consumer, Producer, TopicPartition

from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse


def _connect(b) -> socket.socket:
    return socket.create_connection((b.host, b.port), timeout=5)


def _frame(api_key: int, version: int, body: bytes, correlation_id: int = 7, header_version: int = 1) -> bytes:
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=api_key, api_version=version, correlation_id=correlation_id,
                                          client_id="abuse"), header_version)
    payload = w.getvalue() + body
    return struct.pack(">i", len(payload)) + payload


def _recv_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _produce_and_count(b, topic: str, n: int) -> int:
    p = Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(n):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "abuse-check"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    for _ in range(50):
        for m in c.consume(1000, 1):
            assert m.error() is None
            got += 1
        if got >= n:
            break
    c.close()
    return got


def test_api_versions_too_new_gets_v0_body_with_unsupported_version(grete_broker):
    with _connect(grete_broker) as s:
        s.sendall(_frame(18, 99, b"", header_version=2))
        frame = _recv_frame(s)
    r = Reader(frame)
    assert r.int32() == 7  # response header v0: correlation id only
    body = ApiVersionsResponse.decode(r, 0)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_api_versions_v3_uses_header_v0_and_lists_produce_from_0(grete_broker):
    body = ApiVersionsRequest(client_software_name="x y!", client_software_version="?").to_bytes(3)
    with _connect(grete_broker) as s:
        s.sendall(_frame(18, 3, body, header_version=2))
        frame = _recv_frame(s)
    r = Reader(frame)
    assert r.int32() == 7
    resp = ApiVersionsResponse.decode(r, 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == 0
    assert ranges[0][0] == 0 and ranges[0][1] >= 7   # librdkafka feature checks need Produce 0..7
    assert ranges[1][0] <= 4 <= ranges[1][1]
    assert 71 not in ranges  # answered, not advertised: Kafka without a client-telemetry reporter does the same


def test_garbage_truncated_oversized_and_unknown_requests_close_only_that_connection(grete_broker, topic_name):
    assert _produce_and_count(grete_broker, topic_name, 50) == 50
    abuses = [
        struct.pack(">i", 200_000_000),                    # above socket.request.max.bytes
        struct.pack(">i", -5),                              # negative size
        _frame(1000, 0, b""),                               # unknown API key
        _frame(3, 99, b""),                                 # Metadata version we do not have
        struct.pack(">i", 5) + b"\x00\x03\x00\x01\x00",      # header cut short inside the frame
        _frame(3, 1, b"\xff\xff\xff\x7f"),                  # array length far past the frame
        struct.pack(">i", 1024) + bytes(range(256)) * 4,    # a whole frame of noise
    ]
    for payload in abuses:
        with _connect(grete_broker) as s:
            s.sendall(payload)
            assert _closed(s), payload[:16]
    # A truncated frame (size says more than arrives) just waits; closing it is the client's call.
    with _connect(grete_broker) as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x03")
    assert _produce_and_count(grete_broker, topic_name, 50) == 100  # nothing lost, still serving


def test_pipelined_requests_are_answered_in_order(grete_broker):
    frames = b"".join(_frame(18, 0, b"", correlation_id=i) for i in range(200))
    with _connect(grete_broker) as s:
        s.sendall(frames)
        ids = [struct.unpack_from(">i", _recv_frame(s))[0] for _ in range(200)]
    assert ids == list(range(200))
