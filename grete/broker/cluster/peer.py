"""A connection to another broker, for the requests brokers send each other (LeaderAndIsr,
UpdateMetadata, StopReplica from the controller; ControlledShutdown to it).

Kafka builds these channels without an ApiVersions handshake: the version comes from the
inter-broker protocol version alone (3.9: LeaderAndIsr 7, UpdateMetadata 8, StopReplica 4,
ControlledShutdown 3), so the caller names the version. One request in flight at a time: the
controller's per-broker queue is FIFO anyway.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any, TypeVar

from grete.protocol.codec import Message, Reader, Writer
from grete.protocol.errors import ProtocolError
from grete.protocol.headers import RequestHeader, decode_response_header, encode_request_header
from grete.protocol.messages import APIS, request_header_version, response_header_version

M = TypeVar("M", bound=Message)
_SIZE = struct.Struct(">i")
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, unsent data dropped


_RESPONSES: dict[int, Any] = {}  # response classes by API key: APIS[key].response imports on each use


def _response_class(api_key: int) -> Any:
    cls = _RESPONSES.get(api_key)
    if cls is None:
        cls = _RESPONSES[api_key] = APIS[api_key].response
    return cls


class PeerError(Exception):
    """The peer could not be reached, or closed the connection before answering. ``timed_out``: it
    did not answer in time (a slow or silent peer), as opposed to a refused or reset connection."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        kept, keeping = self._reader, self._writer
        if kept is not None and keeping is not None and not keeping.is_closing():
            if not kept.at_eof() and kept.exception() is None:
                return kept, keeping
            # The peer closed it while it was unused (its connections.max.idle.ms, a restart): a
            # request written to it would read nothing back, so a new one, as Kafka's client reconnects.
            self.close()
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (TimeoutError, OSError) as exc:
            raise PeerError(f"cannot connect to {self.host}:{self.port}: {exc}",
                            timed_out=isinstance(exc, TimeoutError)) from None
        self._reader, self._writer = reader, writer
        return reader, writer

    async def call(self, request: Message, version: int) -> Any:
        """Send ``request`` at ``version``; its response. Raises PeerError (the connection is then
        closed, and the next call reconnects), also for an answer that cannot be decoded."""
        async with self._lock:
            try:
                async with asyncio.timeout(self.timeout_s):  # no task per call, as wait_for makes
                    return await self._call(request, version)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
                # An answer that cannot be decoded leaves the connection in doubt: start it over.
                self.abort()
                raise PeerError(f"{type(request).__name__} to {self.host}:{self.port} failed: "
                                f"{exc or type(exc).__name__}", timed_out=isinstance(exc, TimeoutError)) from None

    async def _call(self, request: Message, version: int) -> Any:
        reader, writer = await self._connect()
        self._correlation_id += 1
        api_key = type(request).API_KEY
        w = Writer()
        size = w.reserve_int32()
        encode_request_header(w, RequestHeader(api_key=api_key, api_version=version,
                                               correlation_id=self._correlation_id, client_id=self.client_id),
                              request_header_version(api_key, version))
        request.encode(w, version)
        w.patch_int32(size, w.nbytes - 4)
        writer.write(w.getvalue())
        await writer.drain()
        (length,) = _SIZE.unpack(await reader.readexactly(4))
        frame = await reader.readexactly(length)
        correlation_id, pos = decode_response_header(frame, response_header_version(api_key, version))
        if correlation_id != self._correlation_id:
            raise OSError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return _response_class(api_key).decode(Reader(frame, pos), version)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    def abort(self) -> None:
        """Give up the connection of a request that failed: reset it, so that the kernel drops what
        it still holds unacknowledged. A graceful close would keep retransmitting it, and after a
        network partition heals the peer would get the old request after the retry (a second
        transaction marker, appended after a later transaction's records, would end that one)."""
        writer = self._writer
        if writer is not None:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                except OSError:
                    pass
            writer.transport.abort()
        self._reader = self._writer = None
