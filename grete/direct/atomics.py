"""Real atomic instructions on shared memory: a small C module built with cffi (API mode).

Python has no atomic read-modify-write on a shared mapping, and the ordering word of a shared
produce region needs one: several processes reserve space in it with fetch-and-add, as RDMA
producers do with an IBV_WR_ATOMIC_FETCH_AND_ADD on the NIC. The slots a consumer polls are written
by the broker under a sequence lock (odd while a write is in progress), which also needs acquire /
release ordering that plain ``struct.pack_into`` does not promise.

The C source is below; it is compiled once per source text into ``${GRETE_CACHE:-~/.cache/grete}/
direct/`` (grete.direct.native; gcc and cffi are dependencies of the direct path), on first use or by
``python -m grete.direct.atomics`` (``scripts/install-test-deps`` runs it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grete.direct import native

CDEF = """
uint64_t grete_faa(char *base, size_t offset, uint64_t delta);
uint64_t grete_load(char *base, size_t offset);
void grete_store(char *base, size_t offset, uint64_t value);
int grete_snapshot(char *dst, char *src, size_t slots, size_t slot_size, int attempts);
int grete_changed(char *dst, char *src, size_t slots, size_t slot_size);
void grete_slot_write(char *base, size_t offset, int64_t *fields, size_t count);
"""

SOURCE = r"""
#include <stdint.h>
#include <string.h>

uint64_t grete_faa(char *base, size_t offset, uint64_t delta) {
    return __atomic_fetch_add((uint64_t *)(base + offset), delta, __ATOMIC_SEQ_CST);
}

uint64_t grete_load(char *base, size_t offset) {
    return __atomic_load_n((uint64_t *)(base + offset), __ATOMIC_ACQUIRE);
}

void grete_store(char *base, size_t offset, uint64_t value) {
    __atomic_store_n((uint64_t *)(base + offset), value, __ATOMIC_RELEASE);
}

/* One "read" of a consumer's whole slot region: copy it, then check that no slot's sequence word
   changed or was odd (a write in progress); retry a few times. 1 on success, 0 if still torn. */
int grete_snapshot(char *dst, char *src, size_t slots, size_t slot_size, int attempts) {
    for (int a = 0; a < attempts; a++) {
        int ok = 1;
        for (size_t i = 0; i < slots; i++) {
            uint64_t seq = __atomic_load_n((uint64_t *)(src + i * slot_size), __ATOMIC_ACQUIRE);
            if (seq & 1) { ok = 0; break; }
            memcpy(dst + i * slot_size + 8, src + i * slot_size + 8, slot_size - 8);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n((uint64_t *)(src + i * slot_size), __ATOMIC_RELAXED) != seq) { ok = 0; break; }
            memcpy(dst + i * slot_size, &seq, 8);
        }
        if (ok) return 1;
    }
    return 0;
}

/* An empty poll's whole cost: 0 when no slot's sequence word moved since ``dst`` was copied. */
int grete_changed(char *dst, char *src, size_t slots, size_t slot_size) {
    for (size_t i = 0; i < slots; i++) {
        uint64_t seq = __atomic_load_n((uint64_t *)(src + i * slot_size), __ATOMIC_ACQUIRE);
        if (seq != *(uint64_t *)(dst + i * slot_size)) return 1;
    }
    return 0;
}

/* The broker's side of the sequence lock: sequence odd, fields, sequence even. */
void grete_slot_write(char *base, size_t offset, int64_t *fields, size_t count) {
    uint64_t *seq = (uint64_t *)(base + offset);
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (size_t i = 0; i < count; i++)
        __atomic_store_n((int64_t *)(base + offset + 8 + 8 * i), fields[i], __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 2, __ATOMIC_RELEASE);
}
"""

_MODULE: Any = None


def cache_dir() -> Path:
    return native.cache_dir()


def _module_name() -> str:
    return native.versioned_name("_grete_atomics", CDEF + SOURCE)


def build() -> Path:
    """Compile the module into the cache directory unless it is there; its path."""
    def compile_into(tmp: Path) -> Path:
        import cffi  # the build needs cffi's compiler front end, loading does not

        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(_module_name(), SOURCE, extra_compile_args=["-O2"])
        return Path(ffi.compile(tmpdir=str(tmp), verbose=False))

    return native.build_once(cache_dir(), _module_name(), compile_into)


def lib() -> Any:
    """The compiled module's ``lib`` (built on first use); its ``ffi`` is ``lib_ffi()``."""
    global _MODULE
    if _MODULE is None:
        _MODULE = native.load(_module_name(), build())
    return _MODULE.lib


def ffi() -> Any:
    lib()
    assert _MODULE is not None
    return _MODULE.ffi


if __name__ == "__main__":
    print(build())
