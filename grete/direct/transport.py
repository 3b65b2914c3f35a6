"""The one-sided transport interface both sides of the direct path are written against.

Verbs, as RDMA offers them and ``shm`` emulates them on one host:

* ``register`` a region (broker: create and expose it; client: map what the broker exposed),
* ``write`` into a region, ``write_with_imm`` (a write followed by a notification the broker
  receives as a completion; the notification carries only (key, region, order, offset, length)),
* ``read`` from a region or a segment file,
* ``fetch_add`` on an 8-byte word of a region (the ordering word),
* completion polling: the client's ``completions`` (acks), the broker's notification callback.

A backend is chosen by name (``direct.transports`` on the broker, ``direct.transport`` in a
client's conf): ``shm`` (grete/direct/shm.py, one host) or ``rdma`` (grete/direct/rdma.py, pyverbs;
imported only when chosen).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from grete.direct import rdma, shm


class Region(Protocol):
    """A registered region: the broker's produce region or a consumer's slot region."""

    length: int

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...

    def read(self, offset: int, length: int) -> bytes: ...

    def copy(self, offset: int, length: int) -> bytearray: ...

    def fetch_add(self, offset: int, delta: int) -> int: ...

    def load(self, offset: int) -> int: ...

    def store(self, offset: int, value: int) -> None: ...

    def snapshot_into(self, dst: Any, slots: int, slot_size: int) -> bool:
        """Copy the first ``slots`` slots, consistently, into ``dst`` (a cffi buffer): one read."""

    def changed_check(self, dst: Any, slots: int, slot_size: int) -> Callable[[], int]:
        """The empty poll: a function returning 0 while those slots equal ``dst``."""

    def close(self) -> None: ...


class Channel(Protocol):
    """A client's connection for notifications out and completions (acks) back."""

    session_id: int

    def notify(self, frame: bytes) -> None: ...

    def completions(self, timeout: float | None) -> list[bytes]: ...

    def close(self) -> None: ...


class FileReader(Protocol):
    """One-sided reads of a segment file the broker named."""

    def read(self, position: int, length: int) -> bytes: ...

    def close(self) -> None: ...


class ClientTransport(Protocol):
    name: str

    def map_region(self, address: str, length: int, *, writable: bool) -> Region: ...

    def connect(self, endpoint: str) -> Channel: ...

    def open_file(self, address: str) -> FileReader: ...


def write_with_imm(channel: Channel, region: Region, offset: int, data: bytes | bytearray | memoryview,
                   imm: bytes) -> None:
    """The data first, then the notification: the broker never sees a notification before its bytes
    (on shm the socket write is the release; on RDMA, RC ordering)."""
    region.write(offset, data)
    channel.notify(imm)


def transport(name: str) -> ClientTransport:
    """The client side of transport ``name`` (a client's ``direct.transport``)."""
    if name == "shm":
        return shm.ShmTransport()
    if name == "rdma":
        return rdma.RdmaTransport()  # raises RdmaUnavailable (a ValueError) with the reason
    raise ValueError(f"direct.transport={name!r}: shm or rdma")
