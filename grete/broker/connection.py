"""One client connection: framing into a reused buffer, dispatch, in-order responses, sendfile.

Why this shape (see reference/machine_limits.md): ``asyncio.BufferedProtocol`` receiving into one
reused bytearray costs a fraction of Streams per small request and avoids fresh-page faults on large
ones. Requests on a connection may be pipelined; their responses go back strictly in request order,
so each request takes a slot in ``_slots`` and slots are written from the head as they fill.

Handlers may keep no reference to the request's bytes after they return (the buffer is reused):
the only zero-copy field is Produce's ``records``, which is appended synchronously.

Repeated empty fetches (idle consumers) take a short cut: the last Fetch whose answer had nothing to
read is kept with its encoded answer (``_FetchMemo``); a request identical to it apart from the
correlation id is answered by re-checking the partitions' state (``fetch.Snapshot.unchanged``) and
patching the correlation id, with no decode, handler pass or encode. Any change in that state falls
back to the full path, so the short cut can only repeat an answer that is still true.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from grete.broker.context import CloseConnection, RequestContext
from grete.broker.registry import Handler, handlers
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode, ProtocolError
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import APIS, response_header_version
from grete.storage.log import FileSlice

if TYPE_CHECKING:
    from grete.broker.broker import Broker


class AnswerSnapshot(Protocol):
    """The hook an empty answer leaves for its repeats (the Fetch handler's ``Snapshot``): whether the
    state it was read from still holds, a way to park until it changes, and the handler's own rules
    for going on after a change. The connection knows no handler; it only calls these."""

    def unchanged(self) -> bool: ...
    def wait(self, max_wait_ms: int) -> tuple[float, asyncio.Future[bool]]: ...
    def resume(self, ctx: RequestContext, request: Any, deadline: float) -> Any: ...

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
FETCH_KEY = 1
_SIZE_AND_ID = struct.Struct(">ii")
INITIAL_BUFFER = 64 * 1024
SHRINK_ABOVE = 8 * 1024 * 1024      # give a huge buffer back once the big frames stop
SENDFILE_MIN_BYTES = 64 * 1024      # below this, pread + write is as cheap and keeps one write path
MAX_PENDING_RESPONSES = 100         # stop reading while this many responses wait (backpressure)


class _Slot:
    """A response place-holder, in request order."""

    __slots__ = ("parts", "done")

    def __init__(self) -> None:
        self.parts: list[Any] | None = None
        self.done = False


class _FetchMemo:
    """The last Fetch with nothing to read: its frame, decoded request, the state it was answered
    from and the answer's bytes after the correlation id."""

    __slots__ = ("head", "tail", "request", "snapshot", "body", "version", "client_id")

    def __init__(self, frame: bytes, request: Any, snapshot: AnswerSnapshot, encoded: bytes,
                 version: int, client_id: str | None) -> None:
        self.head = frame[:4]        # api key + version
        self.tail = frame[8:]        # client id onwards
        self.request = request
        self.snapshot = snapshot
        self.body = encoded[8:]      # response header tagged fields + body
        self.version = version
        self.client_id = client_id

    def matches(self, frame: bytes) -> bool:
        return frame[8:] == self.tail and frame[:4] == self.head

    def answer(self, correlation_id: int) -> bytes:
        return _SIZE_AND_ID.pack(len(self.body) + 4, correlation_id) + self.body


class _FdFile:
    """Minimal file object for loop.sendfile: only fileno() is used on the native path.

    asyncio lseek()s the descriptor after sending; segments are appended with pwrite/O_APPEND,
    so the file position is never relied upon.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, listener: str = "PLAINTEXT") -> None:
        self.broker = broker
        self.listener = listener
        self.max_frame = broker.config.int("socket.request.max.bytes")
        self._handlers = handlers()
        self._buf = bytearray(INITIAL_BUFFER)
        self._start = 0
        self._end = 0
        self._slots: deque[_Slot] = deque()
        self._fetch_memo: _FetchMemo | None = None
        self._sending = False
        self._paused_reading = False
        self._paused_writing = False
        self._closed = False
        self.transport: asyncio.Transport | None = None
        self.peer = "unknown"
        self._idle_handle: asyncio.TimerHandle | None = None
        self._last_active = 0.0
        self._idle_ms = broker.config.int("connections.max.idle.ms")
        self._sndbuf = broker.config.int("socket.send.buffer.bytes")
        self._loop = asyncio.get_running_loop()

    # --- asyncio callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._sndbuf != -1:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "unknown"
        self.broker.connections.add(self)
        self._touch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        if self._idle_handle is not None:
            self._idle_handle.cancel()

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._maybe_resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._end == len(self._buf):
            self._make_room(1)
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self._touch()
        try:
            self._process_frames()
        except ProtocolError as exc:
            self._protocol_violation(str(exc))

    def eof_received(self) -> bool | None:
        return None

    # --- framing ----------------------------------------------------------------------------
    def _process_frames(self) -> None:
        buf = self._buf
        while not self._closed:
            available = self._end - self._start
            if available < 4:
                break
            size = int.from_bytes(buf[self._start:self._start + 4], "big", signed=True)
            if size < 0 or size > self.max_frame:
                # Kafka closes the connection before allocating (InvalidReceiveException).
                self._protocol_violation(f"frame size {size} outside [0, {self.max_frame}] "
                                         "(socket.request.max.bytes)")
                return
            if available < 4 + size:
                self._make_room(4 + size)
                break
            frame = memoryview(buf)[self._start + 4:self._start + 4 + size]
            self._start += 4 + size
            self._dispatch(frame)
            if self._paused_reading:
                break
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buf) > SHRINK_ABOVE:
                self._buf = bytearray(INITIAL_BUFFER)

    def _make_room(self, frame_bytes: int) -> None:
        """Ensure buf[start:] can hold ``frame_bytes``; never resizes in place (views exist)."""
        pending = self._end - self._start
        needed = max(frame_bytes, pending + 1)
        if needed > len(self._buf):
            new = bytearray(max(needed, 2 * len(self._buf)))
            new[:pending] = self._buf[self._start:self._end]
            self._buf = new
        elif self._start + needed > len(self._buf) or self._end == len(self._buf):
            self._buf[:pending] = self._buf[self._start:self._end]
        else:
            return
        self._start, self._end = 0, pending

    # --- dispatch ---------------------------------------------------------------------------
    def _dispatch(self, frame: memoryview) -> None:
        frame_bytes: bytes | None = None
        if len(frame) > 8 and frame[1] == FETCH_KEY and frame[0] == 0 and self.broker.faults is None:
            # Fault injection sees every request, so the short cut is off while faults are installed.
            frame_bytes = bytes(frame)
            memo = self._fetch_memo
            if memo is not None and memo.matches(frame_bytes) and self._answer_from_memo(memo, frame_bytes):
                return
        header, body_pos = decode_request_header(frame)
        handler = self._handlers.get(header.api_key)
        version = header.api_version
        if handler is None or not handler.min_version <= version <= handler.max_version:
            if header.api_key == API_VERSIONS_KEY:
                self._answer_unsupported_api_versions(header.correlation_id)
                return
            # Kafka cannot parse such a request and closes the connection.
            self._protocol_violation(f"unsupported API {header.api_key} v{version} "
                                     f"from client {header.client_id!r}")
            return
        request = handler.request_cls.decode(Reader(frame, body_pos), version)  # type: ignore[attr-defined]
        ctx = RequestContext(self.broker, header.api_key, version, header.correlation_id,
                             header.client_id, self.peer, self.listener)
        # Fault-injection seam for grete.testing: ``broker.faults`` is None unless a test injects
        # faults, so production pays one attribute read. When set, it runs the handler itself and
        # may answer with an injected error, defer the request, or raise CloseConnection.
        faults = self.broker.faults
        try:
            if faults is None:
                result = handler.fn(ctx, request)
            else:
                result = faults.handle(self, handler, ctx, request)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self._close()
            return
        except Exception:
            log.exception("%s v%d handler failed; closing connection from %s", handler.name, version,
                          self.peer)
            self._close()
            return
        if result is None:
            return  # acks=0 produce: no response at all
        slot = self._new_slot()
        memo_key = None if frame_bytes is None else (frame_bytes, request, header.client_id)
        if isinstance(result, asyncio.Future | asyncio.Task) or asyncio.iscoroutine(result):
            future = asyncio.ensure_future(result)
            future.add_done_callback(
                lambda f: self._complete_async(f, slot, handler, version, header.correlation_id, memo_key))
        else:
            slot.parts = self._encode(result, handler, version, header.correlation_id, memo_key)
            self._flush()

    def _new_slot(self) -> _Slot:
        slot = _Slot()
        self._slots.append(slot)
        if len(self._slots) >= MAX_PENDING_RESPONSES:
            self._pause_reading()
        return slot

    # --- repeated empty fetches -------------------------------------------------------------
    def _answer_from_memo(self, memo: _FetchMemo, frame: bytes) -> bool:
        """Answer a repeat of ``memo``'s request if its state still holds; False: take the full path."""
        if not memo.snapshot.unchanged():
            self._fetch_memo = None
            return False
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        slot = self._new_slot()
        max_wait_ms = memo.request.max_wait_ms
        if max_wait_ms <= 0:
            slot.parts = [memo.answer(correlation_id)]
            self._flush()
            return True
        deadline, waited = memo.snapshot.wait(max_wait_ms)
        waited.add_done_callback(lambda f: self._memo_waited(f, slot, memo, correlation_id, deadline))
        return True

    def _memo_waited(self, waited: asyncio.Future[bool], slot: _Slot, memo: _FetchMemo,
                     correlation_id: int, deadline: float) -> None:
        if self._closed:
            return
        if waited.result():
            slot.parts = [memo.answer(correlation_id)]
            self._flush()
            return
        # Something changed while parked: the full handler's rules from here (min_bytes, the rest
        # of max_wait_ms), through the hook the Fetch handler left on its snapshot.
        handler = self._handlers[FETCH_KEY]
        ctx = RequestContext(self.broker, FETCH_KEY, memo.version, correlation_id, memo.client_id,
                             self.peer, self.listener)
        frame = memo.head + correlation_id.to_bytes(4, "big", signed=True) + memo.tail
        memo_key = (frame, memo.request, memo.client_id)
        try:
            result = memo.snapshot.resume(ctx, memo.request, deadline)
        except Exception:
            log.exception("Fetch v%d failed; closing connection from %s", memo.version, self.peer)
            self._close()
            return
        if asyncio.iscoroutine(result):
            asyncio.ensure_future(result).add_done_callback(
                lambda f: self._complete_async(f, slot, handler, memo.version, correlation_id, memo_key))
            return
        slot.parts = self._encode(result, handler, memo.version, correlation_id, memo_key)
        self._flush()

    def _complete_async(self, future: asyncio.Future[Any], slot: _Slot, handler: Handler,
                        version: int, correlation_id: int, memo_key: tuple[bytes, Any, str | None] | None
                        ) -> None:
        if self._closed:
            return
        try:
            response = future.result()
        except Exception:
            log.exception("%s v%d handler failed; closing connection from %s", handler.name, version,
                          self.peer)
            self._close()
            return
        if response is None:
            slot.parts = []
        else:
            slot.parts = self._encode(response, handler, version, correlation_id, memo_key)
        self._flush()

    def _encode(self, response: Any, handler: Handler, version: int, correlation_id: int,
                memo_key: tuple[bytes, Any, str | None] | None = None) -> list[Any]:
        w = Writer()
        size_pos = w.reserve_int32()
        encode_response_header(w, correlation_id, response_header_version(handler.api_key, version))
        response.encode(w, version)
        w.patch_int32(size_pos, w.nbytes - 4)
        if memo_key is None:
            return w.parts()
        # fetch.EmptyFetchResponse (looked up by attribute: connection.py does not import handlers)
        snapshot = getattr(response, "snapshot", None)
        if snapshot is None:
            self._fetch_memo = None
            return w.parts()
        encoded = w.getvalue()
        frame, request, client_id = memo_key
        self._fetch_memo = _FetchMemo(frame, request, snapshot, encoded, version, client_id)
        return [encoded]

    def _answer_unsupported_api_versions(self, correlation_id: int) -> None:
        """KIP-511: a v0-format body with UNSUPPORTED_VERSION and our ApiVersions range."""
        info = APIS[API_VERSIONS_KEY]
        handler = self._handlers[API_VERSIONS_KEY]
        response = info.response(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
            info.response.ApiVersion(api_key=API_VERSIONS_KEY, min_version=handler.min_version,
                                     max_version=handler.max_version)])
        slot = _Slot()
        slot.parts = self._encode(response, handler, 0, correlation_id)
        self._slots.append(slot)
        self._flush()

    # --- writing ----------------------------------------------------------------------------
    def _flush(self) -> None:
        transport = self.transport
        if self._sending or transport is None or self._closed:
            return
        slots = self._slots
        while slots and slots[0].parts is not None:
            parts = slots.popleft().parts
            assert parts is not None
            if any(not isinstance(p, bytes | bytearray | memoryview) for p in parts):
                if self._needs_sendfile(parts):
                    try:
                        rest = self._send_now(transport, parts)
                    except OSError as exc:  # includes ConnectionError
                        log.debug("sendfile to %s failed: %s", self.peer, exc)
                        self._close()
                        return
                    if not rest:
                        continue
                    self._sending = True
                    asyncio.ensure_future(self._send_with_files(rest))
                    return
                parts = [self._read_slice(p) if not isinstance(p, bytes | bytearray | memoryview) else p
                         for p in parts]
            transport.writelines(parts)
        self._maybe_resume_reading()

    @staticmethod
    def _needs_sendfile(parts: list[Any]) -> bool:
        return sum(p.size for p in parts if not isinstance(p, bytes | bytearray | memoryview)) \
            >= SENDFILE_MIN_BYTES

    @staticmethod
    def _read_slice(part: Any) -> bytes:
        data = os.pread(part.fd, part.size, part.position)
        if len(data) != part.size:
            raise OSError(f"short read of a log segment: {len(data)} of {part.size} bytes")
        return data

    def _send_now(self, transport: asyncio.Transport, parts: list[Any]) -> list[Any]:
        """Write what the socket takes right now, straight to its descriptor; the rest, if any.

        Most answers fit the socket buffer whole. Sending them here skips what asyncio's
        loop.sendfile costs per call (a task, pausing and resuming reading, a loop turn): a Java
        consumer's Fetch latency fell from 0.96 to 0.76 ms per 1 MB (docs/benchmarks.md, consume)."""
        sock = transport.get_extra_info("socket")
        if sock is None or transport.get_write_buffer_size():
            return parts  # earlier bytes still queued in the transport: keep the order
        fd = sock.fileno()
        for i, part in enumerate(parts):
            sent = 0  # of this part
            try:
                if isinstance(part, bytes | bytearray | memoryview):
                    sent = os.write(fd, part)
                    if sent < len(part):
                        return [memoryview(part)[sent:], *parts[i + 1:]]
                    continue
                while sent < part.size:
                    n = os.sendfile(fd, part.fd, part.position + sent, part.size - sent)
                    if n == 0:  # the segment is shorter than the index said: never serve past it
                        where = _fd_path(part.fd)
                        log.warning("%s ends at byte %d, inside a Fetch answer for %s; closing the connection",
                                    where, part.position + sent, self.peer)
                        raise OSError(f"{where} ends at byte {part.position + sent}")
                    sent += n
            except BlockingIOError:  # the socket is full: the rest waits for it to drain
                if not sent:
                    return parts[i:]
                return [FileSlice(part.fd, part.position + sent, part.size - sent, part.file), *parts[i + 1:]]
        return []

    async def _send_with_files(self, parts: list[Any]) -> None:
        transport = self.transport
        try:
            for part in parts:
                if self._closed or transport is None:
                    return
                if isinstance(part, bytes | bytearray | memoryview):
                    transport.write(part)
                else:
                    await self._loop.sendfile(transport, _FdFile(part.fd),  # type: ignore[arg-type]
                                              part.position, part.size, fallback=True)
        except (ConnectionError, OSError) as exc:
            log.debug("sendfile to %s failed: %s", self.peer, exc)
            self._close()
            return
        finally:
            self._sending = False
        self._flush()

    # --- flow control and closing -----------------------------------------------------------
    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None and not self._closed:
            self._paused_reading = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (self._paused_reading and not self._paused_writing and not self._closed
                and len(self._slots) < MAX_PENDING_RESPONSES // 2 and self.transport is not None):
            self._paused_reading = False
            self.transport.resume_reading()
            if self._end > self._start:  # frames that arrived before the pause
                self._loop.call_soon(self._resume_processing)

    def _resume_processing(self) -> None:
        try:
            self._process_frames()
        except ProtocolError as exc:
            self._protocol_violation(str(exc))

    def _touch(self) -> None:
        # Per read this only notes the time: re-arming a timer on every read (cancel + call_later)
        # cost more than a whole cached empty Fetch. The one timer re-arms itself on expiry.
        if self._idle_ms <= 0:
            return
        self._last_active = self._loop.time()
        if self._idle_handle is None:
            self._idle_handle = self._loop.call_at(self._last_active + self._idle_ms / 1000,
                                                   self._idle_timeout)

    def _idle_timeout(self) -> None:
        self._idle_handle = None
        if self._closed:
            return
        now = self._loop.time()
        if self._slots:  # still answering: not idle
            self._last_active = now
        deadline = self._last_active + self._idle_ms / 1000
        if deadline > now:  # active since the timer was set: wait out the rest
            self._idle_handle = self._loop.call_at(deadline, self._idle_timeout)
            return
        log.debug("closing idle connection from %s (connections.max.idle.ms)", self.peer)
        self._close()

    def _protocol_violation(self, why: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, why)
        self._close()

    def _close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    def close(self) -> None:
        self._close()


def _fd_path(fd: int) -> str:
    """The file behind a descriptor, for error messages (Linux)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"descriptor {fd}"
