"""The direct client's control connection: ordinary Kafka requests to ``bootstrap.servers``.

Blocking, one request at a time, over grete's generated codecs. Used for ApiVersions (is the direct
path offered?), Metadata (a topic's partitions) and the two direct APIs; data never goes over it.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from grete.direct.layout import DIRECT_CONSUME_ADDRESS, DIRECT_PRODUCE_ADDRESS
from grete.direct.types import KafkaError, KafkaException
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    request_header_version,
    response_header_version,
)

API_VERSIONS_VERSION = 3
METADATA_VERSION = 12


def parse_bootstrap(servers: str) -> tuple[str, int]:
    first = servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bootstrap.servers={servers!r}: expected host:port")
    return host.strip("[]"), int(port)


class Control:
    def __init__(self, bootstrap_servers: str, client_id: str, timeout: float = 30.0) -> None:
        host, port = parse_bootstrap(bootstrap_servers)
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._client_id = client_id
        self._correlation = 0
        versions = self.call(ApiVersionsRequest(client_software_name="grete-direct",
                                                client_software_version="0.1"), ApiVersionsResponse,
                             API_VERSIONS_VERSION)
        offered = {k.api_key for k in versions.api_keys}
        if not {DIRECT_PRODUCE_ADDRESS, DIRECT_CONSUME_ADDRESS} <= offered:
            self.close()
            raise KafkaException(KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                            f"the broker at {host}:{port} does not offer the direct data "
                                            f"path (start it with direct.transports=shm and/or rdma)"))

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self._correlation += 1
        w = Writer()
        size = w.reserve_int32()
        encode_request_header(w, RequestHeader(api_key=request.API_KEY, api_version=version,
                                               correlation_id=self._correlation, client_id=self._client_id),
                              request_header_version(request.API_KEY, version))
        request.encode(w, version)
        w.patch_int32(size, w.nbytes - 4)
        self._sock.sendall(w.getvalue())
        frame = self._exact(struct.unpack(">i", self._exact(4))[0])
        r = Reader(frame)
        if r.int32() != self._correlation:
            raise ConnectionError("response out of order on the control connection")
        if response_header_version(response_cls.API_KEY, version) >= 1:
            r.tagged_fields()
        return response_cls.decode(r, version)

    def partitions(self, topic: str) -> list[int]:
        response = self.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                             allow_auto_topic_creation=False),
                             MetadataResponse, METADATA_VERSION)
        for t in response.topics:
            if t.name == topic:
                if t.error_code:
                    raise KafkaException(KafkaError(t.error_code, f"topic {topic}"))
                return sorted(p.partition_index for p in t.partitions)
        raise KafkaException(KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic}"))

    def _exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the control connection")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self._sock.close()
