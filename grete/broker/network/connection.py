"""One client connection: the asyncio protocol that joins a transport to the sans-IO parts.

Bytes in go to the :class:`~grete.protocol.framing.FrameReader` (receive buffer, frame limits); each
frame is decoded and run through the :class:`~grete.broker.requests.pipeline.Pipeline` with the connection's
:class:`~grete.broker.requests.context.Session`; answers take their place in the
:class:`~grete.broker.network.channel.ResponseQueue` and leave, in request order, through the writer
:func:`~grete.broker.replica.writers.writer_for` chose for this transport (zero-copy on plain TCP, a copy
under TLS).

Why ``asyncio.BufferedProtocol`` (see docs/benchmarks.md): receiving into a reused bytearray costs a
fraction of Streams per small request and avoids fresh-page faults on large ones. Handlers keep no
reference to the request's bytes after they return (the buffer is reused): the only zero-copy field
is Produce's ``records``, which is appended synchronously.

Repeated empty fetches (idle consumers) take a short cut: the last Fetch whose answer had nothing to
read is kept with its encoded answer (``FetchMemo``); a request identical to it apart from the
correlation id is answered by asking the answer's snapshot (a hook the Fetch handler leaves on its
response) whether the partitions' state still holds, and patching the correlation id, with no
decode, handler pass or encode. One asking the same partitions in another order (librdkafka rotates
them) gets the answer in its order, which the hook builds once per order without a read. Any change
in that state falls back to the full path, so the short cut can only repeat an answer that is still
true.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Callable
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

from grete.broker.metrics.broker_metrics import FETCH_CONSUMER, FETCH_FOLLOWER
from grete.broker.network.channel import IdleTimer, Mute, ResponseQueue, Slot
from grete.broker.network.fetch_memo import FetchMemo, MemoKey
from grete.broker.replica.writers import Writer, writer_for
from grete.broker.requests.context import CloseConnection, Later, RequestContext, Session
from grete.broker.requests.pipeline import NotAuthenticated, Pipeline
from grete.broker.requests.registry import (
    CONTROLLER_APIS,
    DIRECT_APIS,
    KRAFT_APIS,
    RAFT_APIS,
    VOTER_CHANGE_APIS,
    ZK_BROKER_APIS,
    Handler,
    handlers,
    lowest_version,
)
from grete.broker.requests.services import Everything
from grete.protocol.codec import Message, Reader
from grete.protocol.codec import Writer as Encoder
from grete.protocol.errors import ErrorCode, FrameTooLarge, ProtocolError
from grete.protocol.framing import FrameReader
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import APIS, ApiKey, response_header_version

if TYPE_CHECKING:
    from grete.broker.broker import Broker
    from grete.broker.security.sasl import ListenerSasl, SaslAuthenticator

log = logging.getLogger(__name__)

_SIZE_AND_ID = struct.Struct(">ii")
# The data plane's requests, which do not hold back the requests behind them: a Produce appends
# before its first wait, in request order (one that must wait first, for its transaction's
# verification, holds the connection), and a parked Fetch changes nothing. Every other request
# answered later holds the connection until its answer is sent, as Kafka's muted channel does.
PIPELINED = frozenset({ApiKey.PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER})


class KafkaConnection(asyncio.BufferedProtocol):
    """A client's connection: its requests decoded and run in arrival order, their answers sent in
    that order, reading muted while an answer must go first (see the module's docstring)."""

    def __init__(self, broker: Broker, pipeline: Pipeline, listener: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT",
                 principal_of: Callable[[Any], str] | None = None,
                 sasl: ListenerSasl | None = None) -> None:
        self.broker = broker
        self.listener = listener
        self._security_protocol = security_protocol
        self._principal_of = principal_of  # TLS: the client certificate's principal
        self._handlers = handlers()
        self._pipeline = pipeline
        self._metrics = broker.metrics
        self._reader = FrameReader(broker.config.get_int("socket.request.max.bytes"), broker.buffer_pool,
                                   broker.memory_pool)
        self._responses = ResponseQueue()
        self._fetch_memo: FetchMemo | None = None
        self._sending = False
        self._loop = asyncio.get_running_loop()
        self._idle = IdleTimer(self._loop, broker.config.get_int("connections.max.idle.ms"),
                               lambda: len(self._responses) > 0, self._idle_close)
        self._mute = Mute(self._loop, self._reader, self._responses, lambda: self._closed, self._process_frames)
        self._quota_abort: asyncio.TimerHandle | None = None  # connection quotas: closed when this fires
        self._held = False  # accepted, not yet admitted by the connection quotas
        self._closed = False
        self.transport: asyncio.Transport | None = None
        self._writer: Writer | None = None
        self.peer = "unknown"
        self.session = Session(listener, security_protocol, self.peer)
        if sasl is not None:
            # Until authenticated: only the SASL exchange, in frames of sasl.server.max.receive.size.
            self.session.sasl = sasl.authenticator(self.session, self._sasl_complete)
            self._reader.max_frame = min(self._reader.max_frame, sasl.max_receive_size)
        self._sndbuf = broker.config.get_int("socket.send.buffer.bytes")

    # --- asyncio callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = self._mute.transport = transport
        _tune(transport.get_extra_info("socket"), self._sndbuf)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "unknown"
        self.session.client_host = self.peer
        if self._principal_of is not None:
            try:
                self.session.principal = self._principal_of(transport.get_extra_info("ssl_object"))
            except Exception as exc:  # no ssl.principal.mapping.rules rule maps it: authentication fails
                log.info("closing connection from %s: %s", self.peer, exc)
                self._closed = True
                transport.abort()
                return
        self.broker.connection_quotas.arrive(self)

    # --- connection quotas (grete.broker.quotas.connection_quotas.Arrival) ---------------------------
    def hold(self) -> None:
        assert self.transport is not None
        self._held = True
        self.transport.pause_reading()

    def admitted(self) -> None:
        assert self.transport is not None
        self._writer = writer_for(self.transport)
        self.broker.connections.add(self)
        if self._held:
            self._held = False
            self.transport.resume_reading()
        self._idle.touch()

    def refuse(self) -> None:
        assert self.transport is not None
        self._closed = True
        self.transport.abort()

    def throttled(self, delay_s: float) -> None:
        assert self.transport is not None
        self._closed = True
        if not self._held:
            self.hold()
        self._quota_abort = self._loop.call_later(delay_s, self.transport.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None and self in self.broker.connections:
            self.broker.connections.discard(self)
            self.broker.connection_quotas.release(self.peer, self.listener)
            self.broker.client_telemetry.connection_closed(id(self.session))
        elif self._held:
            self.broker.connection_quotas.depart(self)
        self._closed = True
        self._mute.end()
        self._reader.close()
        self._forget_memo()
        self.broker.share_groups.connection_closed(id(self.session))  # KIP-932: its share sessions end
        self._idle.cancel()
        if self._quota_abort is not None:
            self._quota_abort.cancel()

    def pause_writing(self) -> None:
        self._mute.socket_full(True)

    def resume_writing(self) -> None:
        self._mute.socket_full(False)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._reader.received(nbytes)
        self._idle.touch()
        self._process_frames()

    # --- frames -----------------------------------------------------------------------------
    def _process_frames(self) -> None:
        reader = self._reader
        try:
            while not self._closed and not self._mute.paused:
                frame = reader.next_frame()
                if frame is None:
                    break
                self._dispatch(frame)
        except FrameTooLarge as exc:
            self._protocol_violation(str(exc), "requests over socket.request.max.bytes")
            return
        except ProtocolError as exc:
            self._protocol_violation(str(exc))
            return
        reader.settle()
        if reader.starved:  # Kafka mutes the channel until the pool can take this request
            self._mute.wait_for_memory()

    def trim(self, quiet_since: float) -> None:
        """Give back a grown receive buffer if nothing arrived since ``quiet_since`` (loop time)."""
        if self._idle.last_active < quiet_since:
            self._reader.trim()

    # --- dispatch ---------------------------------------------------------------------------
    def _dispatch(self, frame: memoryview) -> None:
        if not self.session.authenticated:
            sasl = self.session.sasl
            if sasl is not None and sasl.raw_tokens:
                self._raw_sasl_token(sasl, bytes(frame))
                return
        frame_bytes: bytes | None = None
        if len(frame) > 8 and frame[1] == ApiKey.FETCH and frame[0] == 0 and self.broker.faults is None:
            # Fault injection sees every request, so the short cut is off while faults are installed.
            frame_bytes = bytes(frame)
            memo = self._fetch_memo
            if memo is not None and self._answer_from_memo(memo, frame_bytes):
                return
        header, body_pos = decode_request_header(frame)
        handler = self._handlers.get(header.api_key) if _served(self.broker, header.api_key) else None
        version = header.api_version
        if handler is None or not (lowest_version(handler, self.broker.cluster.zk_broker_apis)
                                   <= version <= handler.max_version):
            if header.api_key == ApiKey.API_VERSIONS:
                self._answer_unsupported_api_versions(header.correlation_id)
                return
            # Kafka cannot parse such a request and closes the connection.
            self._protocol_violation(f"unsupported API {header.api_key} v{version} "
                                     f"from client {header.client_id!r}", "requests for unsupported APIs")
            return
        request = handler.request_cls.decode(Reader(frame, body_pos), version)  # type: ignore[attr-defined]
        if header.api_key == ApiKey.API_VERSIONS and version >= 3:
            self.session.client_software_name = request.client_software_name
            self.session.client_software_version = request.client_software_version
        ctx = RequestContext(self.broker, header.api_key, version, header.correlation_id, header.client_id,
                             self.session, len(frame))
        key = _metrics_key(header.api_key, version, request)
        counters = self._metrics.request(key, version)
        started = perf_counter()
        try:  # the pipeline answers a handler's own failure (UNKNOWN_SERVER_ERROR): these are its own
            result = self._pipeline.run(self, ctx, handler, request)
        except Exception as exc:
            self._close_on(exc, handler, version)
            return
        local_done = perf_counter()
        if ctx.throttle_ms:
            self._mute.throttle(ctx.throttle_ms)
        if result is None:
            return  # acks=0 produce: no response at all
        slot = self._new_slot()
        slot.timing = [counters, started, local_done, local_done]
        memo_key = None if frame_bytes is None else (frame_bytes, request, header.client_id)
        if isinstance(result, Message):
            slot.parts = self._encode(result, handler, version, header.correlation_id, memo_key)
            self._flush()
            if self.session.close_after_response:  # a failed authentication: answered, then closed
                log.info("closing connection from %s: authentication failed", self.peer)
                self._close()
            return
        if key not in PIPELINED or ctx.holds_connection:
            # Kafka mutes a channel until its request is answered: a request behind this one sees
            # its effects (an OffsetFetch behind an OffsetCommit, say). Paused before a Later can
            # settle: its answer may come within then() and resume reading.
            self._mute.pause()
        if isinstance(result, Later):  # settled by the handler's own timer or wake: no task
            result.then(partial(self._completed, slot, handler, version, header.correlation_id, memo_key, ctx))
        else:  # a coroutine or future of the answer
            future = asyncio.ensure_future(result)
            future.add_done_callback(
                lambda f: self._complete_async(f, slot, handler, version, header.correlation_id, memo_key, ctx))

    # --- SASL ---------------------------------------------------------------------------------
    def _raw_sasl_token(self, sasl: SaslAuthenticator, token: bytes) -> None:
        """After SaslHandshake v0: a SASL token without a Kafka header, answered by a raw
        size-prefixed frame; a failure closes the connection (v0 has no error answer)."""
        result = sasl.authenticate(token)
        if result.error_code:
            log.info("closing connection from %s: %s", self.peer, result.error_message)
            self._close()
            return
        slot = self._new_slot()
        slot.parts = [len(result.auth_bytes).to_bytes(4, "big") + result.auth_bytes]
        self._flush()

    def _sasl_complete(self) -> None:
        self._reader.max_frame = self.broker.config.get_int("socket.request.max.bytes")

    def _new_slot(self) -> Slot:
        slot = self._responses.reserve()
        if self._responses.full:
            self._mute.pause()
        return slot

    # --- repeated empty fetches -------------------------------------------------------------
    def _answer_from_memo(self, memo: FetchMemo, frame: bytes) -> bool:
        """Answer a repeat of ``memo``'s request if its state still holds; False: take the full path."""
        body = memo.body_for(frame)
        if body is None:
            return False
        if memo.acls != _acl_generation(self.broker):  # READ may have been revoked: authorized again
            self._forget_memo()
            return False
        max_wait_ms = memo.request.max_wait_ms
        # A repeat that waits on a snapshot whose watch is still parked compares the values at its
        # deadline only (fetch.py, Snapshot.parked); one answered now compares them now.
        if not (max_wait_ms > 0 and memo.snapshot.parked()) and not memo.snapshot.unchanged():
            self._forget_memo()
            return False
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        self._metrics.request(FETCH_CONSUMER, memo.version)  # only a consumer's fetch is memoized
        slot = self._new_slot()
        if max_wait_ms <= 0:
            slot.parts = [memo.answer(correlation_id, body)]
            self._flush()
            return True
        memo.snapshot.wait(max_wait_ms, partial(self._memo_waited, slot, memo, frame, body))
        return True

    def _memo_waited(self, slot: Slot, memo: FetchMemo, frame: bytes, body: bytes, unchanged: bool,
                     deadline: float) -> None:
        """A parked repeat's time is up (``unchanged``: its snapshot still holds) or its snapshot
        changed: the memo's answer, or the Fetch handler's rules from here."""
        if self._closed:
            return
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        if unchanged:
            slot.parts = [memo.answer(correlation_id, body)]
            self._flush()
            return
        # Something changed while parked: the full handler's rules from here (min_bytes, the rest
        # of max_wait_ms), through the hook the Fetch handler left on its snapshot.
        handler = self._handlers[ApiKey.FETCH]
        ctx = RequestContext(self.broker, ApiKey.FETCH, memo.version, correlation_id, memo.client_id, self.session)
        request = memo.request
        try:
            if frame[8:] != memo.tail:  # the same fetch in another order: answered in its own order
                request = handler.request_cls.decode(  # type: ignore[attr-defined]
                    Reader(frame, decode_request_header(frame)[1]), memo.version)
            result = memo.snapshot.resume(ctx, request, deadline)
        except Exception:
            log.exception("Fetch v%d failed; closing connection from %s", memo.version, self.peer)
            self._close()
            return
        memo_key = (frame, request, memo.client_id)
        if isinstance(result, Later):
            result.then(partial(self._completed, slot, handler, memo.version, correlation_id, memo_key, None))
            return
        if asyncio.iscoroutine(result):
            asyncio.ensure_future(result).add_done_callback(
                lambda f: self._complete_async(f, slot, handler, memo.version, correlation_id, memo_key))
            return
        slot.parts = self._encode(result, handler, memo.version, correlation_id, memo_key)
        self._flush()

    def _complete_async(self, future: asyncio.Future[Any], slot: Slot, handler: Handler,
                        version: int, correlation_id: int, memo_key: MemoKey | None,
                        ctx: RequestContext[Everything] | None = None) -> None:
        if not self._closed:
            error = future.exception()
            response = None if error is not None else future.result()
            self._completed(slot, handler, version, correlation_id, memo_key, ctx, response, error)

    def _completed(self, slot: Slot, handler: Handler, version: int, correlation_id: int,
                   memo_key: MemoKey | None, ctx: RequestContext[Everything] | None, response: Any,
                   error: BaseException | None) -> None:
        """A deferred answer is ready (``error``: the handler or the pipeline ended with it)."""
        if self._closed:
            return
        if error is not None:
            self._close_on(error, handler, version)
            return
        if ctx is not None and ctx.throttle_ms:
            self._mute.throttle(ctx.throttle_ms)
        if slot.timing is not None:
            slot.timing[3] = perf_counter()
        if response is None:
            slot.parts = []
        else:
            slot.parts = self._encode(response, handler, version, correlation_id, memo_key)
        self._flush()

    def _encode(self, response: Any, handler: Handler, version: int, correlation_id: int,
                memo_key: MemoKey | None = None) -> list[Any]:
        w = _encoded(response, handler.api_key, version, correlation_id)
        if memo_key is None:
            return w.parts()
        # The Fetch handler's EmptyFetchResponse carries its snapshot (looked up by attribute: the
        # connection imports no handler).
        snapshot = getattr(response, "snapshot", None)
        self._forget_memo()
        if snapshot is None:
            return w.parts()
        encoded = w.getvalue()
        frame, request, client_id = memo_key
        self._fetch_memo = FetchMemo(frame, request, snapshot, encoded, version, client_id,
                                     _acl_generation(self.broker))
        return [encoded]

    def _forget_memo(self) -> None:
        memo, self._fetch_memo = self._fetch_memo, None
        if memo is not None:
            memo.snapshot.release()

    def _answer_unsupported_api_versions(self, correlation_id: int) -> None:
        """KIP-511: a v0-format body with UNSUPPORTED_VERSION and our ApiVersions range."""
        handler = self._handlers[ApiKey.API_VERSIONS]
        response_cls: Any = APIS[ApiKey.API_VERSIONS].response
        response = response_cls(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[response_cls.ApiVersion(
            api_key=ApiKey.API_VERSIONS, min_version=handler.min_version, max_version=handler.max_version)])
        slot = self._responses.reserve()
        slot.parts = self._encode(response, handler, 0, correlation_id)
        self._flush()

    # --- writing ----------------------------------------------------------------------------
    def _flush(self) -> None:
        writer = self._writer
        if self._sending or writer is None or self._closed:
            return
        for slot in self._responses.ready():
            assert slot.parts is not None
            try:
                rest = writer.send(slot.parts)
            except OSError as exc:  # includes ConnectionError and a segment shorter than its index
                log.debug("writing to %s failed: %s", self.peer, exc)
                self._close()
                return
            if slot.timing is not None:
                _observe(slot.timing)
            if rest:
                self._sending = True
                asyncio.ensure_future(self._send_rest(writer, rest))
                return
        self._mute.maybe_resume()

    async def _send_rest(self, writer: Writer, parts: list[Any]) -> None:
        try:
            await writer.send_rest(parts)
        except (ConnectionError, OSError) as exc:
            log.debug("sendfile to %s failed: %s", self.peer, exc)
            self._close()
            return
        finally:
            self._sending = False
        self._flush()

    # --- idleness and closing ----------------------------------------------------------------
    def _idle_close(self) -> None:
        if not self._closed:
            log.debug("closing idle connection from %s (connections.max.idle.ms)", self.peer)
            self._close()

    def _close_on(self, error: BaseException, handler: Handler, version: int) -> None:
        if isinstance(error, (CloseConnection, NotAuthenticated)):
            log.info("closing connection from %s: %s", self.peer, error)
        else:
            log.error("%s v%d failed; closing connection from %s", handler.name, version, self.peer, exc_info=error)
        self._close()

    def _protocol_violation(self, why: str, kind: str = "malformed requests") -> None:
        self.broker.bad_input.warning(log, kind, self.peer, "closing connection from %s: %s", self.peer, why)
        self._close()

    def _close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    def close(self) -> None:
        self._close()


def _tune(sock: socket.socket | None, sndbuf: int) -> None:
    """No Nagle delay on answers; ``socket.send.buffer.bytes`` unless -1 (the kernel's default)."""
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if sndbuf != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        except OSError:
            pass


def _metrics_key(api_key: int, version: int, request: Any) -> int:
    """The request's metrics name: a Fetch is a follower's or a consumer's."""
    if api_key != ApiKey.FETCH:
        return api_key
    replica_id = request.replica_id if version < 15 else request.replica_state.replica_id
    return FETCH_FOLLOWER if replica_id >= 0 else FETCH_CONSUMER


def _served(broker: Broker, api_key: int) -> bool:
    """Whether this node serves ``api_key`` at all: a KRaft controller its own APIs alone, a broker
    its cluster mode's (ZooKeeper's or KRaft's), the direct path's when that is on, and the quorum's
    voter changes only when it forwards them."""
    if broker.controller_only:
        return api_key in CONTROLLER_APIS
    zk = broker.cluster.zk_broker_apis
    return not ((api_key in ZK_BROKER_APIS and not zk) or (api_key in KRAFT_APIS and zk)
                or (api_key in DIRECT_APIS and broker.direct is None)
                or (api_key in RAFT_APIS and not (api_key in VOTER_CHANGE_APIS
                                                  and broker.cluster.forwards_voter_changes)))


def _encoded(response: Any, api_key: int, version: int, correlation_id: int) -> Encoder:
    """A response frame: size, header, body."""
    w = Encoder()
    size_pos = w.reserve_int32()
    encode_response_header(w, correlation_id, response_header_version(api_key, version))
    response.encode(w, version)
    w.patch_int32(size_pos, w.nbytes - 4)
    return w


def _acl_generation(broker: Broker) -> int:
    """Which ACLs a memoized answer was authorized under (0: no authorizer)."""
    return broker.authorizer.generation if broker.authorizer is not None else 0


def _observe(timing: list[Any]) -> None:
    """Kafka's per-phase request times, at the moment the answer's bytes went to the transport."""
    counters, started, local_done, ready = timing
    sent = perf_counter()
    phases = counters.phases
    phases["localtimems"].observe((local_done - started) * 1000)
    phases["remotetimems"].observe((ready - local_done) * 1000)
    phases["responsesendtimems"].observe((sent - ready) * 1000)
    phases["totaltimems"].observe((sent - started) * 1000)
