"""Reading Kafka's size-prefixed frames out of a byte stream, sans I/O: the one framer (the broker's
connections, the tests' clients and the fuzzers use it).

The transport asks :meth:`FrameReader.buffer` for room, receives into it, and reports the count with
:meth:`FrameReader.received`; :meth:`FrameReader.next_frame` then hands out whole frames as views of
the buffer (valid until the next call into the reader).

Two kinds of memory. The broker-wide :class:`MemoryPool` (Kafka's ``queued.max.request.bytes``)
accounts requests as Kafka does: a frame's whole size is reserved when its size prefix is read and
returned when the frame has been handled; while the pool is exhausted the reader reports
``starved``, the connection stops reading and queues, and memory that comes back is reserved for
the waiting frames in the order they queued. The buffer itself follows the bytes that arrived,
never what a frame claims: a frame that announces 100 MB and sends ten bytes allocates ten bytes
(plus the initial buffer), and the buffer doubles only as bytes fill it.
An idle connection holds no buffer at all: it is taken from a :class:`BufferPool` when bytes arrive
and given back once every complete frame is handed out.

Without a bound, a grown buffer stays with its connection while requests keep coming (fresh memory
costs ~1.5 us a page on these machines, so re-growing 64 KB -> 1 MB for every large produce would
cost ~1 ms each); under a bound it goes once its frames are handled, as it would be memory outside
the bound. The node calls :meth:`FrameReader.trim` on connections that have been quiet for a second. A small
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

    def peek(self) -> bytearray:
        """The buffer :meth:`take` would return next, left in the pool: lent for one receive."""
        if not self._free:
            self._free.append(bytearray(BASE_BUFFER))
        return self._free[-1]

    def give(self, buf: bytearray) -> None:
        if len(buf) == BASE_BUFFER and len(self._free) < self._keep:
            self._free.append(buf)


class MemoryPool:
    """The bytes of requests being received or handled, bounded broker-wide by Kafka's
    ``queued.max.request.bytes`` (KIP-72; its non-strict ``SimpleMemoryPool``).

    A request's whole size is reserved once its size prefix is read, and any request is admitted
    while some memory is left, even one that takes the pool below zero: a request larger than the
    bound is served alone and two large requests can never each hold half and wait for the other.
    ``capacity`` <= 0 means unbounded (as Kafka's SocketServer reads it; -1 is its default).

    A reader refused while the pool is exhausted queues for its frame's size; memory that comes back
    is handed to the queue in arrival order (reserved for it before it is told), so no connection
    starves: a request waits at most for those that queued before it, never for a connection that
    releases and asks again, nor for newcomers (Kafka gets the same from shuffling the channels it
    reads under low memory, by chance rather than by order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity if capacity > 0 else -1
        self.used = 0
        # insertion-ordered: first come, first served; a waiter's frame size and its grant callback
        self._waiting: dict[object, tuple[int, Callable[[], None]]] = {}

    @property
    def available(self) -> int:
        return self.capacity - self.used

    def try_reserve(self, nbytes: int) -> bool:
        if self.capacity >= 0 and self.used >= self.capacity:
            return False
        self.used += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._grant()

    def reserve_when_free(self, waiter: object, nbytes: int, granted: Callable[[], None]) -> None:
        """Queue ``waiter`` for ``nbytes``: reserved, then ``granted`` called, once its turn comes."""
        self._waiting[waiter] = (nbytes, granted)
        self._grant()

    def forget(self, waiter: object) -> None:
        """A reader that went away before its turn."""
        self._waiting.pop(waiter, None)

    def _grant(self) -> None:
        waiting = self._waiting
        while waiting and (self.capacity < 0 or self.used < self.capacity):
            nbytes, granted = waiting.pop(next(iter(waiting)))
            self.used += nbytes
            granted()


DEFAULT_MAX_FRAME = 104857600  # socket.request.max.bytes


class FrameReader:
    """One connection's receive side: buffer, frame boundaries, the frame size limit and the frame's
    reservation in the broker-wide :class:`MemoryPool`."""

    __slots__ = ("max_frame", "_pool", "_memory", "_buf", "_start", "_end", "_stash", "_held", "_admitted",
                 "_done", "_lent", "_wanted", "starved")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, pool: BufferPool | None = None,
                 memory: MemoryPool | None = None) -> None:
        self.max_frame = max_frame
        self._pool = pool if pool is not None else BufferPool()
        self._memory = memory if memory is not None else MemoryPool(-1)
        self._buf: bytearray | None = None
        self._start = 0
        self._end = 0
        self._stash = b""  # a small partial frame kept while the connection holds no buffer
        self._held = 0  # bytes reserved for the frame being received (its size, once admitted)
        self._admitted = False  # the frame being received holds its reservation
        self._done = 0  # the reservation of the frame handed out last, returned at the next call
        self._lent = False  # buffer() lent the pool's next buffer; received() takes it
        self._wanted = 0  # the size of a frame refused for memory, queued for in the pool
        self.starved = False  # a frame's size is read and the memory pool is exhausted: stop reading

    @property
    def pending(self) -> int:
        """Bytes received and not yet handed out as frames."""
        return self._end - self._start + len(self._stash)

    def buffer(self) -> memoryview:
        """Room to receive into (never empty)."""
        buf = self._buf
        if buf is None:
            # Lent, not taken: the read may be the end of the stream (0 bytes), and thousands of
            # connections closing at once must not take a buffer each to learn it.
            lent = self._pool.peek()
            stashed = len(self._stash)
            lent[:stashed] = self._stash
            self._lent = True
            return memoryview(lent)[stashed:]
        if self._end == len(buf):
            buf = self._make_room()
        return memoryview(buf)[self._end:]

    def received(self, nbytes: int) -> None:
        if self._lent:  # bytes came: the lent buffer (the pool's next, as nothing ran since) is ours
            self._lent = False
            self._buf = self._pool.take()
            self._start, self._end = 0, len(self._stash)
            self._stash = b""
        self._end += nbytes

    def next_frame(self) -> memoryview | None:
        """The next whole frame (without its size prefix), or None until more bytes arrive or, if
        :attr:`starved`, until the memory pool has room. Raises ProtocolError for a size outside
        [0, max_frame], as Kafka refuses it before reading."""
        if self._done:
            self._release_done()
        buf = self._buf
        if buf is None:
            if not self._stash:
                return None
            # A frame refused for memory may be whole in the stash, and its client may send nothing
            # more until it is answered: look at it again.
            buf = self._unstash()
        available = self._end - self._start
        if available < 4:
            return None
        size = int.from_bytes(buf[self._start:self._start + 4], "big", signed=True)
        if not self._admitted and not self._admit(size):
            return None
        if available < 4 + size:
            return None
        frame = memoryview(buf)[self._start + 4:self._start + 4 + size]
        self._start += 4 + size
        self._admitted = False
        self._done, self._held = self._held, 0
        return frame

    def _unstash(self) -> bytearray:
        buf = self._pool.take()
        stashed = len(self._stash)
        buf[:stashed] = self._stash
        self._buf, self._start, self._end, self._stash = buf, 0, stashed, b""
        return buf

    def _admit(self, size: int) -> bool:
        """Reserve a frame's whole size as soon as it is known (Kafka's NetworkReceive)."""
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame:
            raise FrameTooLarge(size, self.max_frame)
        if self._memory.capacity < 0:  # unbounded (the default): nothing to count, nobody ever waits
            self._admitted = True
            return True
        if not self._memory.try_reserve(size):
            self.starved = True
            self._wanted = size
            return False
        self.starved = False
        self._admitted = True
        self._held = size
        return True

    def settle(self) -> None:
        """Called after the frames handed out were dispatched: their memory goes back to the pool;
        rewind, and give the buffer back when nothing is left in it (views of it are dead by then:
        handlers keep none)."""
        if self._done:
            self._release_done()
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
        # Under a bounded pool a grown buffer goes as Kafka's request buffer does: kept, it would
        # be memory outside the bound.
        if len(buf) == BASE_BUFFER or len(buf) > SHRINK_ABOVE or self._memory.capacity >= 0:
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
        self._pool.give(buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Receive ``data`` and return the frames it completed, as bytes of their own (tools and
        tests; a connection uses :meth:`buffer` / :meth:`received` / :meth:`next_frame`)."""
        frames: list[bytes] = []
        view = memoryview(data)
        while True:
            while (frame := self.next_frame()) is not None:
                frames.append(bytes(frame))
            if self.starved:
                raise ProtocolError("request memory pool exhausted")
            if not view:
                break
            room = self.buffer()
            n = min(len(room), len(view))
            room[:n] = view[:n]
            self.received(n)
            view = view[n:]
        self.settle()
        return frames

    def close(self) -> None:
        """The connection is gone: its buffer and every reservation it held go back."""
        if self._buf is not None:
            self._drop_buffer()
        self._stash = b""
        self._start = self._end = 0
        if self._done:
            self._release_done()
        if self._admitted:
            self._admitted = False
            self._memory.release(self._held)
            self._held = 0

    def _make_room(self) -> bytearray:
        """The buffer is full up to its end: move pending bytes to the front, or grow it by doubling
        (bounded by the frame size it is waiting for, which its reservation covers). Never resizes
        in place: views may exist."""
        buf = self._buf
        assert buf is not None
        pending = self._end - self._start
        if self._start > 0:
            buf[:pending] = buf[self._start:self._end]
            self._start, self._end = 0, pending
            return buf
        wanted = 2 * len(buf)
        if pending >= 4:
            claimed = 4 + int.from_bytes(buf[0:4], "big", signed=True)
            wanted = min(wanted, max(claimed, pending + 1))
        grown = bytearray(wanted)
        grown[:pending] = buf[:pending]
        self._buf = grown
        if len(buf) == BASE_BUFFER:
            self._pool.give(buf)
        return grown

    def _release_done(self) -> None:
        done, self._done = self._done, 0
        self._memory.release(done)

    def when_memory_released(self, wake: Callable[[], None]) -> None:
        """Queue for the refused frame's memory: once granted, the frame is admitted and ``wake``
        is called (the connection reads on)."""
        def granted() -> None:
            self.starved = False
            self._admitted = True
            self._held = self._wanted
            wake()
        self._memory.reserve_when_free(self, self._wanted, granted)

    def forget_waiting(self) -> None:
        self._memory.forget(self)
