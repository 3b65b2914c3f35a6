"""Sans-IO primitives of the Kafka wire format: a bounds-checked ``Reader`` and an appending ``Writer``.

The generated message modules (``grete.protocol.messages``) call these on every request, so each
method is one precompiled ``struct.Struct`` call plus a position update. Bounds checks lean on
``unpack_from`` raising ``struct.error`` (a try block costs nothing in 3.11 until it fires) and turn
every failure into ``ProtocolError``.

``records`` fields never get copied: decoding yields a ``memoryview`` slice of the input, and encoding
accepts an object with ``size`` and ``chunks`` (file slices for sendfile) which the Writer records as
external parts next to its own bytes, without reading them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, Final, NamedTuple, Protocol, Self, TypeAlias, runtime_checkable

from grete.protocol.errors import ErrorCode, KafkaError, ProtocolError

__all__ = [
    "ZERO_UUID", "ChunkedRecords", "FieldSpec", "Message", "Part", "ProtocolError", "Reader",
    "RecordsData", "Struct", "UnsupportedVersion", "Writer",
]

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")
_UUID: Final = struct.Struct(">16s")

ZERO_UUID: Final = uuid.UUID(int=0)

# Largest unsigned varint we accept: 5 bytes carry 32 bits, which is all the protocol uses.
_MAX_UVARINT_BYTES: Final = 5
_MAX_VARLONG_BYTES: Final = 10

_ARRAY_FORMATS: Final = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H",
                         "uint32": "I", "float64": "d"}


class UnsupportedVersion(KafkaError):
    """A value cannot be expressed at the requested version (Kafka's UnsupportedVersionException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)


@runtime_checkable
class ChunkedRecords(Protocol):
    """Records the Writer must not read: ``size`` bytes made of ``chunks`` (e.g. file slices)."""

    @property
    def size(self) -> int: ...

    @property
    def chunks(self) -> Sequence[object]: ...


RecordsData: TypeAlias = bytes | bytearray | memoryview | ChunkedRecords
"""What a ``records`` field holds: decoded values are always ``memoryview``."""

Part: TypeAlias = bytes | bytearray | memoryview | object


def _short() -> ProtocolError:
    return ProtocolError("message truncated")


class Reader:
    """Reads Kafka primitives from ``buf`` starting at ``pos``; every failure is ``ProtocolError``."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        view = memoryview(buf)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        self.buf: memoryview = view
        self.pos: int = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def sub(self, size: int) -> Reader:
        """A reader over the next ``size`` bytes (a tagged field's payload); skips them here."""
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.buf):
            raise _short()
        self.pos = end
        return Reader(self.buf[start:end])

    # Fixed-width integers -----------------------------------------------------------------------

    def unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        """Several consecutive fixed-width fields in one call (the generator groups them)."""
        try:
            values: tuple[Any, ...] = s.unpack_from(self.buf, self.pos)
        except struct.error:
            raise _short() from None
        self.pos += s.size
        return values

    def int8(self) -> int:
        try:
            value: int = _I8.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 1
        return value

    def int16(self) -> int:
        try:
            value: int = _I16.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 2
        return value

    def int32(self) -> int:
        try:
            value: int = _I32.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 4
        return value

    def int64(self) -> int:
        try:
            value: int = _I64.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 8
        return value

    def uint16(self) -> int:
        try:
            value: int = _U16.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 2
        return value

    def uint32(self) -> int:
        try:
            value: int = _U32.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 4
        return value

    def float64(self) -> float:
        try:
            value: float = _F64.unpack_from(self.buf, self.pos)[0]
        except struct.error:
            raise _short() from None
        self.pos += 8
        return value

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> uuid.UUID:
        end = self.pos + 16
        if end > len(self.buf):
            raise _short()
        raw = bytes(self.buf[self.pos:end])
        self.pos = end
        return uuid.UUID(bytes=raw)

    # Varints -----------------------------------------------------------------------------------

    def uvarint(self) -> int:
        """Unsigned LEB128 varint, at most 32 bits (lengths, tags, counts)."""
        pos = self.pos
        try:
            byte = self.buf[pos]
        except IndexError:
            raise _short() from None
        if byte < 0x80:  # lengths and counts are almost always one byte
            self.pos = pos + 1
            return byte
        return self._uvarint_long()

    def _uvarint_long(self) -> int:
        buf = self.buf
        pos = self.pos
        result = 0
        shift = 0
        try:
            while True:
                byte = buf[pos]
                pos += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= 7 * _MAX_UVARINT_BYTES:
                    raise ProtocolError("varint is too long")
        except IndexError:
            raise _short() from None
        if result > 0xFFFFFFFF:
            raise ProtocolError("varint exceeds 32 bits")
        self.pos = pos
        return result

    def varint(self) -> int:
        """Zig-zag signed varint (records)."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        """Zig-zag signed 64-bit varint (records)."""
        buf = self.buf
        pos = self.pos
        raw = 0
        shift = 0
        try:
            while True:
                byte = buf[pos]
                pos += 1
                raw |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= 7 * _MAX_VARLONG_BYTES:
                    raise ProtocolError("varlong is too long")
        except IndexError:
            raise _short() from None
        if raw >> 64:
            raise ProtocolError("varlong exceeds 64 bits")
        self.pos = pos
        return (raw >> 1) ^ -(raw & 1)

    # Lengths, strings, bytes --------------------------------------------------------------------

    def _length(self, compact: bool) -> int:
        """A string/bytes/array length: -1 means null. Rejects lengths past the end of the input."""
        if compact:
            n = self.uvarint() - 1
        else:
            n = self.int32()
        if n > len(self.buf) - self.pos:
            raise ProtocolError(f"length {n} exceeds the {len(self.buf) - self.pos} bytes remaining")
        if n < -1:
            raise ProtocolError(f"negative length {n}")
        return n

    def _string_length(self, compact: bool) -> int:
        if compact:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n > len(self.buf) - self.pos:
            raise ProtocolError(f"string length {n} exceeds the {len(self.buf) - self.pos} bytes remaining")
        if n < -1:
            raise ProtocolError(f"negative string length {n}")
        return n

    def _utf8(self, n: int) -> str:
        start = self.pos
        self.pos = start + n
        try:
            return str(self.buf[start:start + n], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def string(self, compact: bool) -> str:
        n = self._string_length(compact)
        if n < 0:
            raise ProtocolError("null in a non-nullable string")
        return self._utf8(n)

    def nullable_string(self, compact: bool) -> str | None:
        n = self._string_length(compact)
        return None if n < 0 else self._utf8(n)

    def binary(self, compact: bool) -> bytes:
        n = self._length(compact)
        if n < 0:
            raise ProtocolError("null in non-nullable bytes")
        start = self.pos
        self.pos = start + n
        return self.buf[start:start + n].tobytes()

    def nullable_binary(self, compact: bool) -> bytes | None:
        n = self._length(compact)
        if n < 0:
            return None
        start = self.pos
        self.pos = start + n
        return self.buf[start:start + n].tobytes()

    def records(self, compact: bool) -> memoryview | None:
        """A zero-copy view of a records field (no bytes are touched)."""
        n = self._length(compact)
        if n < 0:
            return None
        start = self.pos
        self.pos = start + n
        return self.buf[start:start + n]

    def array_length(self, compact: bool) -> int:
        """An array length, -1 for null; never larger than the bytes left (as Kafka checks too)."""
        return self._length(compact)

    def primitive_array(self, kind: str, n: int) -> list[int]:
        """``n`` fixed-width integers in one unpack (``[]int32`` replica lists and the like)."""
        try:
            values = struct.unpack_from(f">{n}{_ARRAY_FORMATS[kind]}", self.buf, self.pos)
        except struct.error:
            raise _short() from None
        self.pos += n * struct.calcsize(_ARRAY_FORMATS[kind])
        return list(values)

    def tagged_fields(self) -> Sequence[tuple[int, memoryview]]:
        """The tagged-field section of a flexible struct: (tag, payload) in wire order."""
        count = self.uvarint()
        if not count:
            return ()
        if count > len(self.buf) - self.pos:
            raise ProtocolError(f"{count} tagged fields cannot fit in {len(self.buf) - self.pos} bytes")
        fields: list[tuple[int, memoryview]] = []
        seen: set[int] = set()
        for _ in range(count):
            # Writers sort tags, but Kafka's readers do not insist on it; a repeat is malformed.
            tag = self.uvarint()
            if tag in seen:
                raise ProtocolError(f"tagged field {tag} repeated")
            seen.add(tag)
            size = self.uvarint()
            start = self.pos
            end = start + size
            if end > len(self.buf):
                raise _short()
            self.pos = end
            fields.append((tag, self.buf[start:end]))
        return fields


class Writer:
    """Appends Kafka primitives to a bytearray; ``records`` chunk objects become external parts."""

    __slots__ = ("buf", "_parts", "_flushed", "_external")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._parts: list[Part] = []  # finished segments before ``buf`` (only with external records)
        self._flushed = 0  # bytes of our own buffers moved into ``_parts``
        self._external = 0  # bytes held by external parts

    @property
    def nbytes(self) -> int:
        return self._flushed + self._external + len(self.buf)

    def parts(self) -> list[Part]:
        """Everything written, in order: byte chunks interleaved with external record chunks."""
        out = list(self._parts)
        if self.buf:
            out.append(self.buf)
        return out

    def getvalue(self) -> bytes:
        if self._external:
            raise ValueError("writer holds external record chunks; use parts()")
        return b"".join(bytes(p) for p in self.parts())  # type: ignore[arg-type]

    # Size prefix: written as a placeholder and patched once the body is known.

    def reserve_int32(self) -> int:
        if self._parts:
            raise ValueError("reserve the size prefix before writing external records")
        pos = len(self.buf)
        self.buf += b"\0\0\0\0"
        return pos

    def patch_int32(self, pos: int, value: int) -> None:
        # A reserved prefix sits in our first buffer, which external records may have flushed.
        first = self._parts[0] if self._parts else self.buf
        if not isinstance(first, bytearray):
            raise ValueError("no reserved prefix to patch")
        _I32.pack_into(first, pos, value)

    # Fixed width --------------------------------------------------------------------------------

    def pack(self, s: struct.Struct, *values: object) -> None:
        self.buf += s.pack(*values)

    def int8(self, value: int) -> None:
        self.buf += _I8.pack(value)

    def int16(self, value: int) -> None:
        self.buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def uint16(self, value: int) -> None:
        self.buf += _U16.pack(value)

    def uint32(self, value: int) -> None:
        self.buf += _U32.pack(value)

    def float64(self, value: float) -> None:
        self.buf += _F64.pack(value)

    def boolean(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def uuid(self, value: uuid.UUID) -> None:
        self.buf += value.bytes

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    # Varints ------------------------------------------------------------------------------------

    def uvarint(self, value: int) -> None:
        if value < 0 or value > 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {value}")
        buf = self.buf
        while value >= 0x80:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def varint(self, value: int) -> None:
        if not -(1 << 31) <= value < (1 << 31):
            raise ValueError(f"varint out of range: {value}")
        self.uvarint((value << 1) ^ (value >> 31))

    def varlong(self, value: int) -> None:
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"varlong out of range: {value}")
        raw = (value << 1) ^ (value >> 63)
        buf = self.buf
        while raw >= 0x80:
            buf.append((raw & 0x7F) | 0x80)
            raw >>= 7
        buf.append(raw)

    # Lengths, strings, bytes --------------------------------------------------------------------

    def length(self, n: int, compact: bool) -> None:
        """Array/bytes length (-1 = null)."""
        if compact:
            self.uvarint(n + 1)
        else:
            self.buf += _I32.pack(n)

    def string(self, value: str | None, compact: bool) -> None:
        if value is None:
            if compact:
                self.buf.append(0)
            else:
                self.buf += b"\xff\xff"
            return
        data = value.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
            self.buf += _I16.pack(len(data))
        self.buf += data

    def binary(self, value: bytes | bytearray | memoryview | None, compact: bool) -> None:
        if value is None:
            self.length(-1, compact)
            return
        self.length(len(value), compact)
        self.buf += value

    def records(self, value: RecordsData | None, compact: bool, nullable: bool = True) -> None:
        """A records field; chunked values are kept as external parts and never read."""
        if value is None:
            self.length(-1 if nullable else 0, compact)
            return
        if isinstance(value, bytes | bytearray | memoryview):
            self.length(memoryview(value).nbytes, compact)
            self.buf += value
            return
        self.length(value.size, compact)
        if self.buf:
            self._parts.append(self.buf)
            self._flushed += len(self.buf)
            self.buf = bytearray()
        self._parts.extend(value.chunks)
        self._external += value.size

    def primitive_array(self, kind: str, values: Sequence[int] | Sequence[float]) -> None:
        self.buf += struct.pack(f">{len(values)}{_ARRAY_FORMATS[kind]}", *values)

    def tagged_fields(self, known: Sequence[tuple[int, bytes | bytearray | memoryview]],
                      unknown: Sequence[tuple[int, bytes]] | None) -> None:
        """A tagged-field section: known fields (sorted by tag) merged with preserved unknown ones."""
        if not unknown:
            fields: Sequence[tuple[int, bytes | bytearray | memoryview]] = known
        elif not known:
            fields = sorted(unknown, key=_tag_of)
        else:
            fields = sorted([*known, *unknown], key=_tag_of)
        buf = self.buf
        if not fields:
            buf.append(0)
            return
        self.uvarint(len(fields))
        last = -1
        for tag, data in fields:
            if tag <= last:
                raise ValueError(f"tagged field {tag} appears twice")
            last = tag
            self.uvarint(tag)
            self.uvarint(len(data))
            buf += data


def _tag_of(item: tuple[int, object]) -> int:
    return item[0]


class FieldSpec(NamedTuple):
    """Metadata of one generated field (``_FIELDS``), for tests and tooling, not for the hot path."""

    name: str  # Python attribute
    wire_name: str  # name in Kafka's JSON spec
    kind: str  # primitive type name, or "struct"
    struct: str | None  # struct type name (a class attribute of the top-level message class)
    array: bool
    versions: tuple[int, ...]
    nullable: tuple[int, ...]
    tagged: tuple[int, ...]
    tag: int | None
    ignorable: bool


class Struct:
    """Base of every generated struct: ``encode``/``decode`` plus byte-string conveniences."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()

    def encode(self, w: Writer, version: int) -> None:
        raise NotImplementedError

    @classmethod
    def decode(cls, r: Reader, version: int) -> Self:
        raise NotImplementedError

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        return cls.decode(Reader(data), version)

    def to_bytes(self, version: int) -> bytes:
        w = Writer()
        self.encode(w, version)
        return w.getvalue()


class Message(Struct):
    """Base of every top-level message class (requests, responses, data schemas)."""

    __slots__ = ()
    API_KEY: ClassVar[int] = -1
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_FROM: ClassVar[int | None]
