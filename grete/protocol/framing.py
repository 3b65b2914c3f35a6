"""Reading Kafka's size-prefixed frames out of a byte stream, sans I/O: the one framer (the broker's
connections, the tests' clients and the fuzzers use it).

The transport asks :meth:`FrameReader.buffer` for room, receives into it, and reports the count with
:meth:`FrameReader.received`; :meth:`FrameReader.next_frame` then hands out whole frames as views of
the buffer (valid until the next call into the reader).

Memory follows the bytes that arrived, never what a frame claims: a frame that announces 100 MB and
sends ten bytes costs ten bytes (plus the initial buffer), and the buffer doubles only as bytes fill
it. An idle connection holds no buffer at all: it is taken from a :class:`BufferPool` when bytes
arrive and given back once every complete frame is handed out. Growth beyond the pool's buffer size
is reserved from a broker-wide :class:`MemoryPool` (Kafka's ``queued.max.request.bytes``); when the
pool is exhausted the reader reports it and the connection stops reading until memory is released.

A grown buffer stays with its connection while requests keep coming (fresh memory costs ~1.5 us a
page on these machines, so re-growing 64 KB -> 1 MB for every large produce would cost ~1 ms each):
the node calls :meth:`FrameReader.trim` on connections that have been quiet for a second. A small
partial frame left in a pooled buffer is kept aside as bytes of its own size (``STASH_AT_MOST``), so
a connection that announced a large frame and sent a little holds what it sent, not 64 KB.
"""

from __future__ import annotations

from collections.abc import Callable

from grete.protocol.errors import FrameTooLarge, ProtocolError

BASE_BUFFER = 64 * 1024  # a pooled buffer; most requests fit, and reuse avoids fresh-page faults
POOLED_BUFFERS = 64  # free buffers kept for reuse (64 x 64 KB); more are left to the allocator
SHRINK_ABOVE = 8 * 1024 * 1024  # a grown buffer is not kept once the big frames stop
STASH_AT_MOST = BASE_BUFFER // 4  # a partial frame this small is set aside and its buffer pooled


class BufferPool:
    """Free receive buffers of :data:`BASE_BUFFER` bytes, shared by every connection of a broker."""

    def __init__(self, keep: int = POOLED_BUFFERS) -> None:
        self._free: list[bytearray] = []
        self._keep = keep

    def take(self) -> bytearray:
        return self._free.pop() if self._free else bytearray(BASE_BUFFER)

    def give(self, buf: bytearray) -> None:
        if len(buf) == BASE_BUFFER and len(self._free) < self._keep:
            self._free.append(buf)


class MemoryPool:
    """Bytes of buffered requests beyond the pooled base buffers, bounded broker-wide.

    ``capacity`` < 0 means unbounded (Kafka's default for ``queued.max.request.bytes``). A reader
    that cannot reserve registers a callback, called once when memory is released."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiting: list[Callable[[], None]] = []

    def try_reserve(self, nbytes: int) -> bool:
        if self.capacity >= 0 and self.used + nbytes > self.capacity:
            return False
        self.used += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for wake in waiting:
                wake()

    def when_released(self, wake: Callable[[], None]) -> None:
        self._waiting.append(wake)


DEFAULT_MAX_FRAME = 104857600  # socket.request.max.bytes


class FrameReader:
    """One connection's receive side: buffer, frame boundaries and the frame size limit."""

    __slots__ = ("max_frame", "_pool", "_memory", "_buf", "_start", "_end", "_reserved", "_stash")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, pool: BufferPool | None = None,
                 memory: MemoryPool | None = None) -> None:
        self.max_frame = max_frame
        self._pool = pool if pool is not None else BufferPool()
        self._memory = memory if memory is not None else MemoryPool(-1)
        self._buf: bytearray | None = None
        self._start = 0
        self._end = 0
        self._reserved = 0  # bytes of the buffer beyond BASE_BUFFER, held in the memory pool
        self._stash = b""  # a small partial frame kept while the connection holds no buffer

    @property
    def pending(self) -> int:
        """Bytes received and not yet handed out as frames."""
        return self._end - self._start + len(self._stash)

    def buffer(self) -> memoryview | None:
        """Room to receive into; None while the memory pool cannot grow the buffer (stop reading)."""
        buf = self._buf
        if buf is None:
            buf = self._buf = self._pool.take()
            if self._stash:
                stash, self._stash = self._stash, b""
                buf[:len(stash)] = stash
                self._start, self._end = 0, len(stash)
        if self._end == len(buf):
            if not self._make_room():
                return None
            buf = self._buf
            assert buf is not None
        return memoryview(buf)[self._end:]

    def received(self, nbytes: int) -> None:
        self._end += nbytes

    def next_frame(self) -> memoryview | None:
        """The next whole frame (without its size prefix), or None until more bytes arrive.
        Raises ProtocolError for a size outside [0, max_frame], as Kafka refuses it before reading."""
        if self._buf is None:
            return None  # nothing, or only a stashed partial frame
        available = self._end - self._start
        if available < 4:
            return None
        buf = self._buf
        assert buf is not None
        size = int.from_bytes(buf[self._start:self._start + 4], "big", signed=True)
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame:
            raise FrameTooLarge(size, self.max_frame)
        if available < 4 + size:
            return None
        frame = memoryview(buf)[self._start + 4:self._start + 4 + size]
        self._start += 4 + size
        return frame

    def settle(self) -> None:
        """Called after the frames handed out were dispatched: rewind, and give the buffer back when
        nothing is left in it (views of it are dead by then: handlers keep none)."""
        buf = self._buf
        if buf is None:
            return
        if self._start != self._end:
            pending = self._end - self._start
            if len(buf) == BASE_BUFFER and pending <= STASH_AT_MOST:
                self._stash = bytes(buf[self._start:self._end])
                self._start = self._end = 0
                self._drop_buffer()
            return
        self._start = self._end = 0
        if len(buf) == BASE_BUFFER or len(buf) > SHRINK_ABOVE:
            self._drop_buffer()

    def trim(self) -> None:
        """Give back a buffer kept while the connection was busy, if nothing is pending in it."""
        if self._buf is not None and self._start == self._end:
            self._start = self._end = 0
            self._drop_buffer()

    def _drop_buffer(self) -> None:
        buf = self._buf
        assert buf is not None
        self._buf = None
        self._release_reserved()
        self._pool.give(buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Receive ``data`` and return the frames it completed, as bytes of their own (tools and
        tests; a connection uses :meth:`buffer` / :meth:`received` / :meth:`next_frame`)."""
        frames: list[bytes] = []
        view = memoryview(data)
        while True:
            while (frame := self.next_frame()) is not None:
                frames.append(bytes(frame))
            if not view:
                break
            room = self.buffer()
            if room is None:
                raise ProtocolError("request memory pool exhausted")
            n = min(len(room), len(view))
            room[:n] = view[:n]
            self.received(n)
            view = view[n:]
        self.settle()
        return frames

    def close(self) -> None:
        self._buf = None
        self._stash = b""
        self._start = self._end = 0
        self._release_reserved()

    def _make_room(self) -> bool:
        """The buffer is full up to its end: move pending bytes to the front, or grow it by doubling
        (bounded by the frame size it is waiting for). Never resizes in place: views may exist."""
        buf = self._buf
        assert buf is not None
        pending = self._end - self._start
        if self._start > 0:
            buf[:pending] = buf[self._start:self._end]
            self._start, self._end = 0, pending
            return True
        wanted = 2 * len(buf)
        if pending >= 4:
            claimed = 4 + int.from_bytes(buf[0:4], "big", signed=True)
            wanted = min(wanted, max(claimed, pending + 1))
        extra = wanted - len(buf)
        if not self._memory.try_reserve(extra):
            return False
        grown = bytearray(wanted)
        grown[:pending] = buf[:pending]
        self._buf = grown
        self._reserved += extra
        if len(buf) == BASE_BUFFER:
            self._pool.give(buf)
        return True

    def _release_reserved(self) -> None:
        if self._reserved:
            self._memory.release(self._reserved)
            self._reserved = 0

    def when_memory_released(self, wake: Callable[[], None]) -> None:
        self._memory.when_released(wake)
