"""The ``shm`` transport: the direct path's one-sided verbs on one host.

* Regions are files under the broker's ``direct.shm.dir`` (tmpfs, /dev/shm by default), mapped
  by both sides: a write is a copy into the mapping, a read a copy out of it.
* Fetch-and-add is a real atomic instruction on the mapping (grete.direct.atomics).
* Notifications (the WriteWithImm's immediate) and acks are fixed 32-byte frames on a Unix stream
  socket: only (key, region, order, offset, length) goes over it, never data.
* Segment files are read with ``pread`` on a descriptor of their own: a file cut short underneath
  gives a short read (a clean error), never SIGBUS as a mapping past its end would.
"""

from __future__ import annotations

import functools
import mmap
import os
import select
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grete.direct import atomics
from grete.direct.layout import FRAME, HELLO


class ShmRegion:
    """A mapped region file; ``fetch_add``/``load``/``store`` are atomic on 8-byte aligned words."""

    def __init__(self, path: str | Path, length: int, *, writable: bool, create: bool = False) -> None:
        flags = os.O_RDWR if writable else os.O_RDONLY
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, length)
            elif os.fstat(fd).st_size < length:
                raise ValueError(f"{path}: region shorter than {length} bytes")
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            self._map = mmap.mmap(fd, length, access=access)
        finally:
            os.close(fd)
        self.path = Path(path)
        self.length = length
        self._lib = atomics.lib()
        # A consumer maps its slot region read-only: the C side only loads through this pointer.
        self._ptr: Any = atomics.ffi().from_buffer("char[]", self._map, require_writable=False)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        end = offset + len(data)
        if offset < 0 or end > self.length:
            raise ValueError(f"write [{offset}, {end}) outside the region's {self.length} bytes")
        self._map[offset:end] = data

    def read(self, offset: int, length: int) -> bytes:
        return self._map[offset:offset + length]

    def copy(self, offset: int, length: int) -> bytearray:
        """A private, writable copy of ``[offset, offset + length)`` (one memcpy)."""
        with memoryview(self._map) as view:
            return bytearray(view[offset:offset + length])

    def view(self) -> memoryview:
        return memoryview(self._map)

    def address(self) -> int:
        """Where the mapping starts in this process (what an RDMA memory region is registered over)."""
        return int(atomics.ffi().cast("uintptr_t", self._ptr))

    def fetch_add(self, offset: int, delta: int) -> int:
        return int(self._lib.grete_faa(self._ptr, offset, delta))

    def load(self, offset: int) -> int:
        return int(self._lib.grete_load(self._ptr, offset))

    def store(self, offset: int, value: int) -> None:
        self._lib.grete_store(self._ptr, offset, value)

    def slot_write(self, offset: int, fields: tuple[int, ...]) -> None:
        self._lib.grete_slot_write(self._ptr, offset, fields, len(fields))

    def snapshot_into(self, dst: Any, slots: int, slot_size: int) -> bool:
        """Copy ``slots`` consistent slots into ``dst`` (a cffi buffer): one read of them all."""
        return bool(self._lib.grete_snapshot(dst, self._ptr, slots, slot_size, 64))

    def changed_check(self, dst: Any, slots: int, slot_size: int) -> Callable[[], int]:
        """A no-argument function: 0 while none of the first ``slots`` slots changed since ``dst``
        was last filled by ``snapshot_into`` (the empty poll, one C call)."""
        return functools.partial(self._lib.grete_changed, dst, self._ptr, slots, slot_size)

    def close(self) -> None:
        self._ptr = None
        try:
            self._map.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes when it does


class ShmChannel:
    """A client's notification socket: frames out, acks back."""

    def __init__(self, endpoint: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(endpoint)
        hello = self._recv_exact(FRAME)
        (self.session_id,) = HELLO.unpack(hello)
        self._pending = b""

    def _recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the direct channel")
            data += chunk
        return data

    def notify(self, frame: bytes) -> None:
        self._sock.sendall(frame)

    def completions(self, timeout: float | None) -> list[bytes]:
        """Acks that have arrived; waits up to ``timeout`` seconds for the first (None: forever)."""
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return []
        data = self._sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the broker closed the direct channel")
        data = self._pending + data
        whole = len(data) - len(data) % FRAME
        self._pending = data[whole:]
        return [data[i:i + FRAME] for i in range(0, whole, FRAME)]

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()


class ShmFileReader:
    def __init__(self, address: str) -> None:
        self._fd = os.open(address, os.O_RDONLY)

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ShmTransport:
    name = "shm"

    def map_region(self, address: str, length: int, *, writable: bool) -> ShmRegion:
        return ShmRegion(address, length, writable=writable)

    def connect(self, endpoint: str) -> ShmChannel:
        return ShmChannel(endpoint)

    def open_file(self, address: str) -> ShmFileReader:
        return ShmFileReader(address)

