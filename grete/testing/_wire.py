"""A tiny blocking Kafka client over grete's own codecs: creates topics on a broker in another process
(subprocess mode) without a client library, and lets tests check exact error codes on the wire."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    request_header_version,
    response_header_version,
)

CREATE_TOPICS_VERSION = 5


class Wire:
    """One connection; requests may be sent ahead of their responses (pipelining, long polls)."""

    client_id = "grete.testing"  # also for tests that build one around their own socket

    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "grete.testing",
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:  # an SSL listener: the same frames inside TLS
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.correlation_id = 0
        self.client_id = client_id

    def send(self, request: Any, version: int) -> int:
        self.sock.sendall(self._frame(request, version))
        return self.correlation_id

    def send_together(self, requests: list[tuple[Any, int]]) -> None:
        """Several requests in one write, so that the broker reads them at once (pipelining at its
        tightest); their answers are received in order with :meth:`receive`."""
        self.sock.sendall(b"".join(self._frame(request, version) for request, version in requests))

    def _frame(self, request: Any, version: int) -> bytes:
        self.correlation_id += 1
        w = Writer()
        size = w.reserve_int32()
        encode_request_header(w, RequestHeader(api_key=request.API_KEY, api_version=version,
                                               correlation_id=self.correlation_id, client_id=self.client_id),
                              request_header_version(request.API_KEY, version))
        request.encode(w, version)
        w.patch_int32(size, w.nbytes - 4)
        return w.getvalue()

    def receive(self, response_cls: Any, version: int) -> Any:
        frame = _exact(self.sock, struct.unpack(">i", _exact(self.sock, 4))[0])
        r = Reader(frame)
        r.int32()  # correlation id
        if response_header_version(response_cls.API_KEY, version) >= 1:
            r.tagged_fields()
        return response_cls.decode(r, version)

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self.send(request, version)
        return self.receive(response_cls, version)

    def close(self) -> None:
        self.sock.close()


def call(host: str, port: int, request: Any, response_cls: Any, version: int, timeout: float = 10.0,
         client_id: str = "grete.testing") -> Any:
    """One request on a fresh connection."""
    wire = Wire(host, port, timeout, client_id)
    try:
        return wire.call(request, response_cls, version)
    finally:
        wire.close()


def create_topic(host: str, port: int, name: str, partitions: int, configs: dict[str, str]) -> None:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=-1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
    response = call(host, port, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), CreateTopicsResponse,
                    CREATE_TOPICS_VERSION)
    for result in response.topics:
        if result.error_code != 0:
            raise RuntimeError(f"creating topic {name!r} failed: {ErrorCode(result.error_code).name}"
                               f" {result.error_message or ''}".rstrip())


def _exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)
