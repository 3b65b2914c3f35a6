"""A minimal blocking Kafka client over grete's own codecs, for exact-error-code tests."""

from __future__ import annotations

import socket
import struct
from typing import Any

from grete.protocol.codec import Reader, Writer
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import request_header_version, response_header_version


class Wire:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.correlation_id = 0

    def send(self, request: Any, version: int) -> int:
        self.correlation_id += 1
        w = Writer()
        size = w.reserve_int32()
        encode_request_header(w, RequestHeader(api_key=request.API_KEY, api_version=version,
                                               correlation_id=self.correlation_id, client_id="wire-test"),
                              request_header_version(request.API_KEY, version))
        request.encode(w, version)
        w.patch_int32(size, w.nbytes - 4)
        self.sock.sendall(w.getvalue())
        return self.correlation_id

    def receive(self, response_cls: Any, version: int) -> Any:
        frame = self._exact(struct.unpack(">i", self._exact(4))[0])
        r = Reader(frame)
        r.int32()  # correlation id
        if response_header_version(response_cls.API_KEY, version) >= 1:
            r.tagged_fields()
        return response_cls.decode(r, version)

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self.send(request, version)
        return self.receive(response_cls, version)

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()
