"""The direct producer's v2 batch encoder: C (grete/direct/_encode.c) with a Python twin.

A batch is one bytearray whose first 61 bytes are kept for the header. Both encoders offer

* ``append(batch, timestamp_delta, offset_delta, key, value, headers) -> len(batch)``: one record,
  encoded at the end (attributes 0; ``headers`` a list of ``(str, bytes | None)`` or None);
* ``seal(batch, count, base_timestamp, max_timestamp) -> bytearray``: the header and CRC-32C
  (compression none, no producer id or sequence); the C one seals in place.

The C module is compiled on first use into the direct path's cache (grete.direct.native), like the
atomics; without a compiler (or with ``GRETE_DIRECT_ENCODER=python``) the producer uses the Python
encoder, which is also the reference the tests hold the C one to.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from grete.direct import native
from grete.protocol.records.batch import BATCH_OVERHEAD
from grete.protocol.records.record import batch_from_body
from grete.protocol.records.varint import encode_varint

log = logging.getLogger(__name__)

SOURCE_PATH = Path(__file__).with_name("_encode.c")
ENV = "GRETE_DIRECT_ENCODER"  # c, python, or unset: C when it can be built
MODULE = "_grete_encode"  # the name its PyInit function carries


class Encoder(NamedTuple):
    name: str  # "c" or "python"
    append: Callable[..., int]
    seal: Callable[[bytearray, int, int, int], bytearray]


# --- the Python encoder --------------------------------------------------------------------------
# Zig-zag varints of -1 .. 16382 (lengths, deltas), precomputed: a record is encoded with a few
# lookups and concatenations instead of a loop per varint.
_SMALL_VARINTS = [encode_varint(n) for n in range(-1, (1 << 14) - 1)]


def _varint(n: int) -> bytes:
    return _SMALL_VARINTS[n + 1] if -1 <= n < (1 << 14) - 1 else encode_varint(n)


def _field(data: Any) -> bytes:
    return b"\x01" if data is None else _varint(len(data)) + data


def _headers(headers: list[tuple[str, bytes | None]]) -> bytes:
    out = [_varint(len(headers))]
    for name, value in headers:
        out.append(_field(name.encode("utf-8", "surrogateescape")))
        out.append(_field(value))
    return b"".join(out)


def py_append(batch: bytearray, timestamp_delta: int, offset_delta: int, key: Any, value: Any,
              headers: list[tuple[str, bytes | None]] | None) -> int:
    # The key and value are copied once, into the batch (no intermediate record bytes).
    head = b"\x00" + _varint(timestamp_delta) + _varint(offset_delta)
    key_len = _varint(-1 if key is None else len(key))
    value_len = _varint(-1 if value is None else len(value))
    tail = _headers(headers) if headers else b"\x00"
    batch += _varint(len(head) + len(key_len) + (len(key) if key else 0) + len(value_len)
                     + (len(value) if value else 0) + len(tail))
    batch += head
    batch += key_len
    if key:
        batch += key
    batch += value_len
    if value:
        batch += value
    batch += tail
    return len(batch)


def py_seal(batch: bytearray, count: int, base_timestamp: int, max_timestamp: int) -> bytearray:
    with memoryview(batch) as view, view[BATCH_OVERHEAD:] as body:
        return batch_from_body(body, count, base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                               last_offset_delta=count - 1)


PYTHON = Encoder("python", py_append, py_seal)


# --- the C encoder ---------------------------------------------------------------------------------
def _compile_into(tmp: Path) -> Path:
    return native.compile_extension(tmp, MODULE, SOURCE_PATH)


def build() -> Path:
    """Compile ``_encode.c`` into the cache unless this source's build is there; its path."""
    directory = native.cache_dir() / native.versioned_name(MODULE, SOURCE_PATH.read_text())
    return native.build_once(directory, MODULE, _compile_into)


def native_module() -> ModuleType:
    """The compiled C encoder (built on first use); raises when it cannot be built."""
    loaded = _native()
    if isinstance(loaded, Exception):
        raise loaded
    return loaded


@functools.cache
def _native() -> ModuleType | Exception:
    try:  # tried once per process: without a compiler, later producers neither retry nor warn again
        return native.load(MODULE, build())
    except Exception as exc:  # no compiler, no Python headers, no source in this install
        log.warning("direct producer: C batch encoder unavailable (%s); encoding in Python", exc)
        return exc


def select() -> Encoder:
    """The encoder a new producer uses: C unless ``GRETE_DIRECT_ENCODER=python`` or it cannot be built."""
    choice = os.environ.get(ENV, "")
    if choice == "python":
        return PYTHON
    loaded = _native()
    if isinstance(loaded, Exception):
        if choice == "c":
            raise loaded
        return PYTHON
    return Encoder("c", loaded.append, loaded.seal)


if __name__ == "__main__":
    print(build())
