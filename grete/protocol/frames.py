"""Split a byte stream into size-prefixed Kafka frames, sans IO.

Works with plain ``feed(data)`` or with asyncio's BufferedProtocol (``get_buffer`` /
``buffer_updated``), so the kernel writes straight into the buffer frames are cut from.

Frames are memoryviews of the splitter's buffers, and they stay valid after later reads: the
splitter never writes over bytes it has handed out. When the free tail of a buffer gets too small
it allocates a fresh one (sized for the pending frame once its prefix is known) and moves only the
unfinished tail there; the old buffer lives as long as some frame still points into it.
"""

from __future__ import annotations

import struct
from typing import Final

from grete.protocol.errors import FrameTooLarge, ProtocolError

DEFAULT_MAX_SIZE: Final = 104857600  # socket.request.max.bytes
_CHUNK: Final = 256 * 1024
_MIN_FREE: Final = 4096
_SIZE: Final = struct.Struct(">i")


class FrameSplitter:
    """Accumulates bytes and returns each complete frame's payload (without the size prefix)."""

    __slots__ = ("max_size", "_buf", "_start", "_end", "_frame_size")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray(_CHUNK)
        self._start = 0  # first byte not yet handed out
        self._end = 0  # end of received bytes
        self._frame_size = -1  # payload size of the pending frame once its prefix is parsed

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A writable view to receive into (BufferedProtocol.get_buffer)."""
        needed = 4 if self._frame_size < 0 else 4 + self._frame_size
        free = len(self._buf) - self._end
        fits = len(self._buf) - self._start >= needed
        if not fits or (free < _MIN_FREE and free < needed - self.pending) or free == 0:
            self._reallocate(max(_CHUNK, needed))
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last buffer; returns the frames now complete."""
        if nbytes < 0 or self._end + nbytes > len(self._buf):
            raise ValueError(f"bad byte count {nbytes}")
        self._end += nbytes
        return self._split()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Copy ``data`` in and return the frames it completes."""
        frames: list[memoryview] = []
        view = memoryview(data).cast("B")
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            frames.extend(self.buffer_updated(n))
        return frames

    def _split(self) -> list[memoryview]:
        frames: list[memoryview] = []
        buf = self._buf
        while True:
            if self._frame_size < 0:
                if self._end - self._start < 4:
                    break
                size: int = _SIZE.unpack_from(buf, self._start)[0]
                if size < 0:
                    raise ProtocolError(f"negative frame size {size}")
                if size > self.max_size:
                    raise FrameTooLarge(size, self.max_size)
                self._frame_size = size
            begin = self._start + 4
            stop = begin + self._frame_size
            if stop > self._end:
                break
            frames.append(memoryview(buf)[begin:stop])
            self._start = stop
            self._frame_size = -1
        return frames

    def _reallocate(self, size: int) -> None:
        # A new buffer instead of moving bytes in place: handed-out frames keep pointing at the old one.
        new = bytearray(size)
        pending = self._end - self._start
        new[:pending] = self._buf[self._start:self._end]
        self._buf = new
        self._start = 0
        self._end = pending
