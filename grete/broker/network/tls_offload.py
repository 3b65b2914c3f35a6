"""TLS for SSL listeners with the record crypto off the event loop.

asyncio's own TLS transport encrypts and decrypts on the loop's thread: a large Fetch answer (read
from the segment, then encrypted) or a large Produce request held the loop for its whole size while
the machine's other core idled. Here :class:`TlsProtocol` sits on the plain TCP transport, runs the
handshake with an ``ssl.SSLObject`` over two ``MemoryBIO``\\ s, and then hands the connection's
protocol a :class:`TlsTransport`. Large answers are encrypted on a small shared pool of threads
(:func:`crypto_pool`): OpenSSL releases the interpreter lock inside ``SSLObject.write``, and
``os.preadv`` does too, so a worker reads file slices into its own reused buffer and encrypts them
(one call cuts a quarter of a megabyte into 16 KB records) while the loop serves other connections.
Small answers stay on the loop, where a thread hand-off would cost more than the crypto.

Requests are decrypted on the loop, straight into the connection's receive buffer, by the C record
reader (grete.broker.network.tls_records): every whole record the BIO holds in one call, where
``SSLObject.read`` returns one per call and clients send records of 1-2 KB. Decrypting on a worker
instead cost more than it saved on two cores, for two reasons measured (docs/benchmarks.md, "What
TLS costs"): the socket must not be read while the worker holds the SSLObject, or the ciphertext
stashed behind it goes into OpenSSL's memory BIO in one piece afterwards, and that BIO grows by
reallocating and wiping its whole buffer (a megabyte written in 16 KB pieces into a growing BIO
costs 2.3 ms); and not reading meanwhile serializes a connection's decryption with its requests'
handling, adding a thread hand-off per read.

One rule keeps this safe: a connection's ``SSLObject`` and BIOs are used by one thread at a time.
Each connection has at most one job in flight; while it runs, the loop only queues (ciphertext that
arrives, parts to send), and the job's results go out in order when it is done. A connection that
closes mid-transfer drops its queues at once; a job in flight finishes its bounded chunk and its
result is discarded.

Kernel TLS (kTLS) would let the kernel encrypt sendfile'd slices; :func:`ktls_unavailable` says why it
cannot be used (it needs ``ssl.OP_ENABLE_KTLS``, Python 3.12+, and the kernel's ``tls`` module), and
this transport is the path either way (docs/security.md, "TLS performance").
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from grete.broker.network import tls_records
from grete.broker.replica.writers import FileRange, Slice, fd_path, is_bytes

log = logging.getLogger(__name__)

OFFLOAD_MIN_BYTES = 64 * 1024  # below this, crypto on the loop costs less than a thread hand-off
JOB_BYTES = 1 << 20            # plaintext per job: the socket sends one job's output while the next is encrypted
READ_CHUNK = 256 * 1024        # the reused buffer file slices are read into, per worker thread
RAW_RECEIVE = 1 << 20          # ciphertext received per socket read, into one buffer per thread
STASH_LIMIT = 8 << 20          # ciphertext queued behind a job before the socket is no longer read
WRITE_HIGH = 4 << 20           # plaintext queued to encrypt that pauses the protocol's writing
HANDSHAKE_TIMEOUT_S = 60.0     # asyncio's ssl_handshake_timeout default
CRYPTO_THREADS = 2

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_local = threading.local()


def crypto_pool() -> ThreadPoolExecutor:
    """The threads every TLS connection's bulk crypto runs on (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(CRYPTO_THREADS, thread_name_prefix="grete-tls")
        return _pool


def ktls_unavailable() -> str | None:
    """Why kernel TLS cannot carry this process's TLS records, or None when both Python's ssl
    module and the kernel offer it."""
    if not hasattr(ssl, "OP_ENABLE_KTLS"):
        return (f"Python {sys.version_info.major}.{sys.version_info.minor} with {ssl.OPENSSL_VERSION} "
                "has no ssl.OP_ENABLE_KTLS")
    if not os.path.exists("/proc/net/tls_stat"):
        return "the kernel's tls module is not loaded (no /proc/net/tls_stat)"
    return None


@dataclass
class _Work:
    """A job: plaintext parts to encrypt, and what came of them."""

    parts: list[Any]
    size: int
    cipher: list[bytes] = field(default_factory=list)
    error: Exception | None = None


def _receive_buffer() -> memoryview:
    """The buffer every TLS connection of this thread's loop receives into: a read is in the BIO or
    stashed before the loop reads another socket, so one serves them all (an idle TLS connection
    holds no receive buffer, and a Produce stream is read a megabyte per call)."""
    buf: memoryview | None = getattr(_local, "receive", None)
    if buf is None:
        buf = _local.receive = memoryview(bytearray(RAW_RECEIVE))
    return buf


def _read_buffer() -> memoryview:
    buf: memoryview | None = getattr(_local, "buffer", None)
    if buf is None:
        buf = _local.buffer = memoryview(bytearray(READ_CHUNK))
    return buf


def _encrypt_slice(sslobj: ssl.SSLObject, outgoing: ssl.MemoryBIO, part: Slice, out: list[bytes]) -> None:
    buf = _read_buffer()
    position, left = part.position, part.size
    while left:
        n = os.preadv(part.fd, [buf[:min(left, len(buf))]], position)
        if n <= 0:
            raise OSError(f"short read of {fd_path(part.fd)}: {part.size - left} of {part.size} bytes "
                          f"at {part.position}")
        sslobj.write(buf[:n])
        position += n
        left -= n
        out.append(outgoing.read())


def _encrypt(sslobj: ssl.SSLObject, outgoing: ssl.MemoryBIO, work: _Work) -> _Work:
    """Encrypt ``work``'s parts on whichever thread holds the connection's SSLObject."""
    try:
        for part in work.parts:
            if is_bytes(part):
                sslobj.write(part)
            else:
                _encrypt_slice(sslobj, outgoing, part, work.cipher)
    except (ssl.SSLError, OSError) as exc:
        work.error = exc
    work.cipher.append(outgoing.read())  # also anything reading left there (alerts, key updates)
    return work


def _take(queue: deque[Any], limit: int) -> tuple[list[Any], int]:
    """Parts from the front of ``queue`` up to ``limit`` bytes, the last one cut if it is larger."""
    taken: list[Any] = []
    size = 0
    while queue and size < limit:
        part = queue[0]
        length = len(part) if is_bytes(part) else part.size
        room = limit - size
        if length <= room:
            taken.append(queue.popleft())
            size += length
        elif is_bytes(part):
            view = memoryview(part)
            taken.append(view[:room])
            queue[0] = view[room:]
            size += room
        else:
            taken.append(FileRange(part.fd, part.position, room))
            queue[0] = FileRange(part.fd, part.position + room, part.size - room)
            size += room
    return taken, size


class TlsProtocol(asyncio.BufferedProtocol):
    """The protocol on the accepted TCP socket: the TLS handshake, then the record layer for the
    connection's own protocol (``app_factory()``, a BufferedProtocol) through a TlsTransport."""

    def __init__(self, context: ssl.SSLContext, app_factory: Callable[[], asyncio.BufferedProtocol],
                 read_into: tls_records.Reader | None = None) -> None:
        self._app_factory = app_factory
        self._read_into = read_into or tls_records.select()[1]
        self._loop = asyncio.get_running_loop()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.sslobj = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.raw: asyncio.Transport | None = None
        self.app: asyncio.BufferedProtocol | None = None
        self.transport: TlsTransport | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        self.job: Future[_Work] | None = None          # the worker's job holding the SSLObject, if any
        self._stash: list[bytes] = []                  # ciphertext that came while a job ran
        self._stash_bytes = 0
        self._out: deque[Any] = deque()                # plaintext parts to encrypt, in order
        self.out_bytes = 0
        self.app_paused = False
        self._raw_paused_reading = False
        self._raw_paused_writing = False
        self._app_writing_paused = False
        self.closing = False                           # close(): send what is queued, then close_notify
        self.closed = False

    # --- the TCP side ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.raw = transport
        # Ciphertext goes out a job at a time: room for one job in the socket's queue while the next
        # is encrypted.
        transport.set_write_buffer_limits(high=2 * JOB_BYTES, low=JOB_BYTES)
        self._handshake_timer = self._loop.call_later(HANDSHAKE_TIMEOUT_S, self._handshake_timed_out)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _receive_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        """Ciphertext in the thread's receive buffer: in the BIO, or stashed behind a job, before
        this returns (the next connection read receives into the same buffer)."""
        received = _receive_buffer()[:nbytes]
        if self.closed or self.closing:
            return
        if self.app is None:
            self._incoming.write(received)
            self._handshake()
            return
        if self.job is None and not self._stash:
            self._incoming.write(received)
            self._read()
            return
        self._stash.append(bytes(received))
        self._stash_bytes += nbytes
        self._advance()

    def eof_received(self) -> bool | None:
        return None  # the TCP transport closes; connection_lost follows

    def pause_writing(self) -> None:
        self._raw_paused_writing = True
        self._control_flow()

    def resume_writing(self) -> None:
        self._raw_paused_writing = False
        self._pump()
        self._control_flow()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._drop()
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if self.app is not None:
            app, self.app = self.app, None
            app.connection_lost(exc)

    # --- handshake ---------------------------------------------------------------------------
    def _handshake(self) -> None:
        assert self.raw is not None
        try:
            self.sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._send_ciphertext([self._outgoing.read()])
            return
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", self.raw.get_extra_info("peername"), exc)
            self._send_ciphertext([self._outgoing.read()])  # the alert, if any
            self._abort()
            return
        self._send_ciphertext([self._outgoing.read()])
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self.app = self._app_factory()
        self.transport = TlsTransport(self)
        self.app.connection_made(self.transport)
        self._read()  # records sent right behind the handshake

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        if self.app is None and not self.closed:
            log.debug("TLS handshake timed out")
            self._abort()

    # --- the record layer --------------------------------------------------------------------
    def _read(self) -> None:
        """Decrypt what the BIO holds straight into the app's receive buffer, on the loop, every
        whole record that fits in one call, before the app hears of them."""
        app = self.app
        while app is not None and self.job is None and not self.app_paused and not self.closed and not self.closing:
            buf = memoryview(app.get_buffer(-1))
            try:
                filled, state = self._read_into(self.sslobj, buf)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS connection from %s failed: %s", self._peer(), exc)
                self._abort()
                return
            if filled:
                app.buffer_updated(filled)
            if state == tls_records.CLOSED:
                app.eof_received()
                self.close()
            if state != tls_records.FULL:
                break
        if self.job is None and self._outgoing.pending:  # what reading wrote (alerts, key updates)
            self._send_ciphertext([self._outgoing.read()])
        self._control_flow()

    def _pump(self) -> None:
        """Encrypt what is queued while the SSLObject is free: small answers on the loop at once,
        large ones a job at a time on the crypto threads."""
        while self.job is None and not self.closed:
            parts: list[Any] = []
            size = 0
            if not self._raw_paused_writing:
                parts, size = _take(self._out, JOB_BYTES)
            if not parts:
                self._finish_closing()
                return
            work = _Work(parts, size)
            if size < OFFLOAD_MIN_BYTES:
                self._done(_encrypt(self.sslobj, self._outgoing, work))
                continue
            self._submit(_encrypt, self.sslobj, self._outgoing, work)

    def _submit(self, fn: Callable[..., _Work], *args: Any) -> None:
        self.job = crypto_pool().submit(fn, *args)
        self.job.add_done_callback(self._from_worker)

    def _from_worker(self, future: Future[_Work]) -> None:
        """On the worker: hand the finished job back to the loop."""
        try:
            self._loop.call_soon_threadsafe(self._job_done, future)
        except RuntimeError:  # the loop is closed: nothing is left to send to
            pass

    def _job_done(self, future: Future[_Work]) -> None:
        self.job = None
        if self.closed:
            return  # the connection went while the job ran: its output goes nowhere
        try:
            work = future.result()
        except Exception:
            log.exception("TLS crypto for %s failed; closing the connection", self._peer())
            self._abort()
            return
        self._done(work)
        if self.closed:
            return
        self._advance()
        self._pump()

    def _done(self, work: _Work) -> None:
        self.out_bytes -= work.size
        self._send_ciphertext(work.cipher)
        if work.error is not None:
            log.debug("TLS connection from %s failed: %s", self._peer(), work.error)
            self._abort()
            return
        self._control_flow()

    def _advance(self) -> None:
        """The read side, when the SSLObject is free again: the ciphertext that came while a job
        held it goes to the BIO and is read."""
        if self.closed or self.closing or self.job is not None:
            self._control_flow()
            return
        stash, self._stash, self._stash_bytes = self._stash, [], 0
        for data in stash:
            self._incoming.write(data)
        self._read()

    def _send_ciphertext(self, chunks: Iterable[bytes]) -> None:
        data = [c for c in chunks if c]
        if data and self.raw is not None and not self.raw.is_closing():
            self.raw.writelines(data)

    def _control_flow(self) -> None:
        """Pause the TCP socket's reading while the app is paused or ciphertext piles up behind a
        job; pause the app's writing while its answers pile up."""
        raw = self.raw
        if raw is None or self.closed:
            return
        hold = self.app_paused or self._stash_bytes >= STASH_LIMIT
        if hold != self._raw_paused_reading:
            self._raw_paused_reading = hold
            (raw.pause_reading if hold else raw.resume_reading)()
        app = self.app
        if app is None:
            return
        # Paused while the socket's queue is over its mark or answers pile up: both only shrink
        # through events that come back here (the socket's resume_writing, a job done).
        full = self._raw_paused_writing or self.out_bytes >= WRITE_HIGH
        if full != self._app_writing_paused:
            self._app_writing_paused = full
            (app.pause_writing if full else app.resume_writing)()

    # --- what the TlsTransport asks ---------------------------------------------------------
    def write_parts(self, parts: Iterable[Any]) -> None:
        if self.closing or self.closed:
            return
        for part in parts:
            size = len(part) if is_bytes(part) else part.size
            if size:
                self._out.append(part)
                self.out_bytes += size
        self._pump()
        self._control_flow()

    def pause_reading(self) -> None:
        self.app_paused = True
        self._control_flow()

    def resume_reading(self) -> None:
        if self.app_paused:
            self.app_paused = False
            self._loop.call_soon(self._resumed)

    def _resumed(self) -> None:
        self._advance()  # also reads what the BIO held while the app was paused

    def close(self) -> None:
        """Send what is queued, then close_notify, then close the socket."""
        self.closing = True
        self._stash, self._stash_bytes = [], 0
        self._pump()

    def _finish_closing(self) -> None:
        if not self.closing or self._out or self.closed or self.raw is None:
            return
        try:
            self.sslobj.unwrap()
        except (ssl.SSLError, OSError):
            pass  # close_notify is written; the peer's answer is not awaited
        self._send_ciphertext([self._outgoing.read()])
        self.closed = True
        self.raw.close()

    def _abort(self) -> None:
        self.closed = True
        self._drop()
        if self.raw is not None:
            self.raw.abort()

    def abort(self) -> None:
        self._abort()

    def _drop(self) -> None:
        self._stash, self._stash_bytes = [], 0
        self._out.clear()
        self.out_bytes = 0

    def buffered(self) -> int:
        """Bytes held for the connection: ciphertext received, plaintext to send."""
        return self._stash_bytes + self.out_bytes

    def _peer(self) -> Any:
        return self.raw.get_extra_info("peername") if self.raw is not None else None


class TlsTransport(asyncio.Transport):
    """What the connection's protocol writes to and reads through; file slices are welcome
    (:meth:`write_parts`): they are read and encrypted off the loop."""

    def __init__(self, tls: TlsProtocol) -> None:
        super().__init__()
        self.tls = tls

    def write_parts(self, parts: Iterable[Any]) -> None:
        self.tls.write_parts(parts)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.tls.write_parts((data,))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.tls.write_parts(list_of_data)

    def get_write_buffer_size(self) -> int:
        raw = self.tls.raw
        return self.tls.out_bytes + (raw.get_write_buffer_size() if raw is not None else 0)

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.tls.pause_reading()

    def resume_reading(self) -> None:
        self.tls.resume_reading()

    def is_reading(self) -> bool:
        return not self.tls.app_paused and not self.tls.closed

    def is_closing(self) -> bool:
        return self.tls.closing or self.tls.closed

    def close(self) -> None:
        self.tls.close()

    def abort(self) -> None:
        self.tls.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        sslobj = self.tls.sslobj
        if name == "ssl_object":
            return sslobj
        if name == "sslcontext":
            return sslobj.context
        if name == "peercert":
            return sslobj.getpeercert()
        if name == "cipher":
            return sslobj.cipher()
        raw = self.tls.raw
        return raw.get_extra_info(name, default) if raw is not None else default
