"""Reading TLS records many at a time: the C reader (``_tls_records.c``) and Python's ssl as the fallback.

``SSLObject.read`` returns one record per call, and a Produce request from librdkafka arrives as TLS
records of 1-2 KB, so reading a megabyte of requests through it is ~550 Python calls on the event
loop. The C reader decrypts all the whole records the connection's incoming BIO holds in one call,
with the interpreter lock released, from the same ``SSL`` object Python's ssl module made.

It is compiled on first use into grete's cache of C modules (grete.direct.native), linked against the
libssl and libcrypto this interpreter has loaded. Without a compiler, on a Python whose ``_ssl`` keeps
its state elsewhere, or with ``GRETE_TLS_READER=python``, connections read through ``SSLObject.read``.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from grete.direct import native

log = logging.getLogger(__name__)

SOURCE_PATH = Path(__file__).with_name("_tls_records.c")
MODULE = "_grete_tls_records"
ENV = "GRETE_TLS_READER"  # c, python, or unset: C when it can be built

WANT_READ, FULL, CLOSED = 0, 1, 2  # why a read stopped: no whole record left, buffer full, close_notify

# (ssl_object, buffer) -> (bytes read, WANT_READ | FULL | CLOSED); raises ssl.SSLError
Reader = Callable[[ssl.SSLObject, memoryview], tuple[int, int]]


def python_read_into(sslobj: ssl.SSLObject, buf: memoryview) -> tuple[int, int]:
    """The same through ``SSLObject.read``, a record per call."""
    filled = 0
    try:
        while filled < len(buf):
            n = int(sslobj.read(len(buf) - filled, buf[filled:]))
            if not n:
                return filled, CLOSED
            filled += n
    except ssl.SSLWantReadError:
        return filled, WANT_READ
    return filled, FULL


def _openssl_libraries() -> list[str]:
    """The libssl and libcrypto files this process has mapped (Python's ssl module loaded them)."""
    found: dict[str, str] = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rsplit(None, 1)[-1] if "/" in line else ""
            name = os.path.basename(path)
            for lib in ("libssl", "libcrypto"):
                if name.startswith(lib + ".so") and lib not in found:
                    found[lib] = path
    if len(found) != 2:
        raise OSError(f"cannot find the libssl and libcrypto {ssl.OPENSSL_VERSION} is loaded from")
    return [found["libssl"], found["libcrypto"]]


def build() -> Path:
    libraries = _openssl_libraries()
    key = SOURCE_PATH.read_text() + "\n".join(libraries)
    directory = native.cache_dir() / native.versioned_name(MODULE, key)
    return native.build_once(directory, MODULE,
                             lambda tmp: native.compile_extension(tmp, MODULE, SOURCE_PATH, libraries))


@functools.cache
def _native() -> ModuleType | Exception:
    try:  # tried once per process
        module = native.load(MODULE, build())
        _check(module)
        return module
    except Exception as exc:  # no compiler, no Python headers, another _ssl layout
        log.warning("TLS: C record reader unavailable (%s); reading a record per call through Python's ssl", exc)
        return exc


def _check(module: ModuleType) -> None:
    """Refuse the module unless it finds the SSL object of a fresh SSLObject (raises TypeError)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe = context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
    module.read_into(_inner(probe), memoryview(bytearray(1)))


def _inner(sslobj: ssl.SSLObject) -> Any:
    return sslobj._sslobj  # type: ignore[attr-defined]  # the _ssl._SSLSocket an SSLObject wraps


def select() -> tuple[str, Reader]:
    """The reader connections use, and its name ("c" or "python")."""
    choice = os.environ.get(ENV, "")
    if choice == "python":
        return "python", python_read_into
    loaded = _native()
    if isinstance(loaded, Exception):
        if choice == "c":
            raise loaded
        return "python", python_read_into
    read = loaded.read_into

    def c_read_into(sslobj: ssl.SSLObject, buf: memoryview) -> tuple[int, int]:
        n, state = read(_inner(sslobj), buf)
        return int(n), int(state)
    return "c", c_read_into


if __name__ == "__main__":
    print(build())  # ./scripts/install-test-deps builds it ahead, as the direct path's modules
