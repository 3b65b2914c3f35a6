"""Kafka's record compression codecs (attribute bits 0-2) on top of ``cramjam``.

* gzip (1): RFC 1952, one member.
* snappy (2): Kafka's Java client writes the *xerial* framing: a 16-byte header
  (``\\x82SNAPPY\\x00``, version 1, compatible version 1) followed by ``[int32 length, raw block]*``.
  librdkafka may write one raw snappy block. We write xerial (like Java) and read xerial, raw and,
  leniently, the official snappy framing format.
* lz4 (3): the LZ4 frame format with independent blocks (Java's reader decodes every block on its
  own, so linked blocks would break it).
* zstd (4): a zstd frame.

All decoding goes through a size cap (decompression bombs): a stream that would expand beyond
``max_output`` bytes is rejected as CORRUPT_MESSAGE, like any other undecodable stream.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

import cramjam

from grete.protocol.errors import ErrorCode, KafkaError

NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

CODEC_NAMES: Final[dict[int, str]] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: Final[dict[str, int]] = {name: codec for codec, name in CODEC_NAMES.items()}

# Generous: a 1 MiB batch of highly repetitive text legitimately expands a few hundred times.
DEFAULT_MAX_OUTPUT: Final = 256 * 1024 * 1024

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024  # xerial's default block size, as Java writes it
_INT32 = struct.Struct(">i")
_SNAPPY_FRAMED_MAGIC: Final = b"\xff\x06\x00\x00sNaPpY"

_OVERFLOW_HINTS: Final = ("failed to write whole buffer", "smaller than required")

Buffer = bytes | bytearray | memoryview


def _corrupt(codec: int, why: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{CODEC_NAMES.get(codec, codec)} stream: {why}")


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


# --- compression ---------------------------------------------------------------------------------
def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` the way Kafka's Java client would for ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data if isinstance(data, bytes) else bytes(data))  # it takes bytes only
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


# --- decompression -------------------------------------------------------------------------------
def decompress(codec: int, data: Buffer, max_output: int = DEFAULT_MAX_OUTPUT) -> bytearray:
    """Decompress one record stream; raise CORRUPT_MESSAGE on bad input or more than ``max_output`` bytes."""
    if codec == NONE:
        if len(data) > max_output:
            raise _corrupt(codec, f"more than {max_output} bytes")
        return bytearray(data)
    if codec == GZIP:
        return _bounded(codec, cramjam.gzip.decompress_into, data, max_output)
    if codec == SNAPPY:
        return _snappy_decompress(data, max_output)
    if codec == LZ4:
        return _bounded(codec, cramjam.lz4.decompress_into, data, max_output)
    if codec == ZSTD:
        return _bounded(codec, cramjam.zstd.decompress_into, data, max_output)
    raise _corrupt(codec, "unknown compression codec")


def _bounded(codec: int, into: Callable[[Buffer, bytearray], int], data: Buffer,
             max_output: int) -> bytearray:
    """Decompress into a buffer that grows 4x per attempt, never beyond ``max_output`` (+1 to detect)."""
    cap = max_output + 1
    size = min(cap, max(64 * 1024, 4 * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = into(data, out)
        except cramjam.DecompressionError as exc:
            message = str(exc)
            if not any(hint in message for hint in _OVERFLOW_HINTS):
                raise _corrupt(codec, message) from None
            if size >= cap:
                raise _corrupt(codec, f"expands beyond {max_output} bytes") from None
            size = min(cap, size * 4)
            continue
        if written > max_output:
            raise _corrupt(codec, f"expands beyond {max_output} bytes")
        del out[written:]
        return out


def _snappy_decompress(data: Buffer, max_output: int) -> bytearray:
    view = memoryview(data)
    if bytes(view[:8]) == XERIAL_MAGIC:
        return _xerial_decompress(view, max_output)
    if bytes(view[:len(_SNAPPY_FRAMED_MAGIC)]) == _SNAPPY_FRAMED_MAGIC:
        return _bounded(SNAPPY, cramjam.snappy.decompress_into, view, max_output)
    return _snappy_raw(view, max_output)


def _snappy_raw(block: memoryview, max_output: int) -> bytearray:
    try:
        length = int(cramjam.snappy.decompress_raw_len(block))
        if length > max_output:
            raise _corrupt(SNAPPY, f"expands beyond {max_output} bytes")
        out = bytearray(length)
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise _corrupt(SNAPPY, str(exc)) from None
    if written != length:
        raise _corrupt(SNAPPY, "block shorter than its declared length")
    return out


def _xerial_decompress(view: memoryview, max_output: int) -> bytearray:
    if len(view) < _XERIAL_HEADER.size:
        raise _corrupt(SNAPPY, "truncated xerial header")
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(view):
        if len(view) - pos < 4:
            raise _corrupt(SNAPPY, "truncated xerial block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise _corrupt(SNAPPY, "xerial block length out of range")
        out += _snappy_raw(view[pos:pos + length], max_output - len(out))
        pos += length
    return out


# --- lz4 frame header checksum for magic v0 ------------------------------------------------------
# Kafka 0.8-0.9 computed the lz4 frame header checksum over the magic number too. Java (and
# kafka-python) still write that "broken" checksum for magic v0 and ignore it when reading v0.
_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32: Final = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 for inputs shorter than 16 bytes (all a frame descriptor ever needs)."""
    if len(data) >= 16:
        raise ValueError("xxh32_short handles fewer than 16 bytes")
    h = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        h = (h + int.from_bytes(data[pos:pos + 4], "little") * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (h + byte * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def lz4_descriptor_problem(frame: Buffer) -> str | None:
    """What Kafka's lz4 reader (Lz4BlockInputStream's FLG/BD checks) refuses in a frame descriptor,
    or None. It reads only frames of version 01 with independent blocks, no dictionary id, and a
    block size of 64 KB-4 MB; a standard LZ4 frame with linked blocks (lz4js writes those) is valid
    LZ4 but not something Kafka stores or a Java consumer could read."""
    view = memoryview(frame)
    if len(view) < 6 or bytes(view[:4]) != _LZ4_MAGIC:
        return None  # not a frame at all: decoding reports it
    flg, bd = view[4], view[5]
    if flg & 0x03:
        return "lz4 frame: FLG reserved bits (and dictionary id) must be 0"
    if not flg & 0x20:
        return "lz4 frame: dependent block stream is unsupported (BLOCK_INDEPENDENCE must be set)"
    if flg >> 6 != 1:
        return f"lz4 frame: version {flg >> 6} is unsupported"
    if bd & 0x8F:
        return "lz4 frame: BD reserved bits must be 0"
    if not 4 <= (bd >> 4) & 7 <= 7:
        return f"lz4 frame: block size value {(bd >> 4) & 7} is not between 4 and 7"
    return None


def lz4_set_header_checksum(frame: Buffer, broken: bool) -> bytes:
    """Rewrite an lz4 frame's header checksum: Kafka's broken v0 variant, or the standard one."""
    data = bytes(frame)
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        return data
    descriptor_end = 6 + (8 if data[4] & 0x08 else 0)  # FLG, BD, optional content size
    if len(data) <= descriptor_end:
        return data
    covered = data[0:descriptor_end] if broken else data[4:descriptor_end]
    checksum = (xxh32_short(covered) >> 8) & 0xFF
    return data[:descriptor_end] + bytes((checksum,)) + data[descriptor_end + 1:]
