"""The storage layer's system calls, and a seam to make them fail in tests.

Storage code calls ``io.pwrite(...)``, ``io.fsync(...)`` and so on instead of ``os.*``. In
production these names ARE the ``os`` functions (``io.pwrite is os.pwrite``), so a call costs the
same one global-plus-attribute lookup as ``os.pwrite``. ``inject()`` rebinds them to wrappers that
consult a ``FaultInjector``: a test can make the next N calls of a kind, on files under a
directory, fail with a chosen errno (EIO, ENOSPC, EROFS...), then ``reset()`` puts ``os`` back.

Wrappers of descriptor calls find the file's path through ``/proc/self/fd`` (Linux), only while
a fault injector is installed.
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# Kinds of operation a fault can target, and the os functions in each kind.
KINDS: Final = {
    "open": ("open",),
    "write": ("write", "pwrite", "ftruncate"),
    "read": ("read", "pread"),
    "fsync": ("fsync",),
    "rename": ("rename", "replace"),
    "unlink": ("unlink",),
    "mkdir": ("mkdir",),
    "listdir": ("listdir",),
}
_PATH_ARG: Final = frozenset({"open", "rename", "replace", "unlink", "mkdir", "listdir"})

open = os.open
write = os.write
pwrite = os.pwrite
read = os.read
pread = os.pread
ftruncate = os.ftruncate
fsync = os.fsync
rename = os.rename
replace = os.replace
unlink = os.unlink
mkdir = os.mkdir
listdir = os.listdir


@dataclass
class _Fault:
    directory: Path
    kind: str
    errno: int
    remaining: int  # -1: every call until cleared


class FaultInjector:
    """Pending faults, matched by operation kind and by the directory a file lies under."""

    def __init__(self) -> None:
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self.hits: list[tuple[str, str, int]] = []  # (kind, path, errno) of every injected failure

    def fail(self, directory: Path | str, kind: str, err: int = errno_mod.EIO, times: int = 1) -> None:
        """The next ``times`` calls of ``kind`` on files under ``directory`` raise OSError(err)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {sorted(KINDS)}")
        with self._lock:
            self._faults.append(_Fault(Path(os.path.realpath(directory)), kind, err, times))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def check(self, kind: str, path: str | None) -> None:
        if path is None:
            return
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and _under(path, fault.directory):
                    if fault.remaining > 0:
                        fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    self.hits.append((kind, path, fault.errno))
                    raise OSError(fault.errno, os.strerror(fault.errno), path)


def _under(path: str, directory: Path) -> bool:
    return path == str(directory) or path.startswith(str(directory) + os.sep)


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _wrap(name: str, kind: str, injector: FaultInjector) -> Callable[..., Any]:
    real = getattr(os, name)
    by_path = name in _PATH_ARG

    def call(*args: Any, **kwargs: Any) -> Any:
        target = os.path.realpath(args[0]) if by_path else _fd_path(args[0])
        injector.check(kind, target)
        return real(*args, **kwargs)

    call.__name__ = name
    return call


_installed: FaultInjector | None = None


def inject() -> FaultInjector:
    """Install a fresh fault injector (tests only); storage calls go through it until reset()."""
    global _installed
    injector = FaultInjector()
    for kind, names in KINDS.items():
        for name in names:
            globals()[name] = _wrap(name, kind, injector)
    _installed = injector
    return injector


def reset() -> None:
    """Back to the plain os functions."""
    global _installed
    for names in KINDS.values():
        for name in names:
            globals()[name] = getattr(os, name)
    _installed = None


def injected() -> FaultInjector | None:
    return _installed
