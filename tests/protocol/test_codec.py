"""Primitives: known encodings, bounds checks that raise ProtocolError, and property round trips."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grete.protocol.codec import ZERO_UUID, Reader, Writer
from grete.protocol.errors import ProtocolError


def written(fn_name: str, *args: object) -> bytes:
    w = Writer()
    getattr(w, fn_name)(*args)
    return w.getvalue()


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f"),
])
def test_unsigned_varint_known(value: int, encoded: bytes) -> None:
    assert written("uvarint", value) == encoded
    assert Reader(encoded).uvarint() == value


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
])
def test_zigzag_varint_known(value: int, encoded: bytes) -> None:
    assert written("varint", value) == encoded
    assert Reader(encoded).varint() == value
    assert written("varlong", value) == encoded
    assert Reader(encoded).varlong() == value


def test_fixed_width_big_endian() -> None:
    w = Writer()
    w.int8(-2)
    w.int16(0x0102)
    w.int32(-1)
    w.int64(1)
    w.uint16(0xFFFE)
    w.uint32(0xFFFFFFFE)
    w.float64(1.5)
    w.boolean(True)
    w.uuid(uuid.UUID(int=1))
    data = w.getvalue()
    assert data == (b"\xfe" + b"\x01\x02" + b"\xff\xff\xff\xff" + b"\x00" * 7 + b"\x01" + b"\xff\xfe" + b"\xff\xff\xff\xfe"
                    + struct.pack(">d", 1.5) + b"\x01" + b"\x00" * 15 + b"\x01")
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.uint16(), r.uint32(), r.float64(), r.boolean(),
            r.uuid()) == (-2, 0x0102, -1, 1, 0xFFFE, 0xFFFFFFFE, 1.5, True, uuid.UUID(int=1))
    assert r.remaining() == 0


def test_strings_classic_and_compact() -> None:
    assert written("string", "héllo", False) == b"\x00\x06h\xc3\xa9llo"
    assert written("string", "héllo", True) == b"\x07h\xc3\xa9llo"
    assert written("string", None, False) == b"\xff\xff"
    assert written("string", None, True) == b"\x00"
    assert Reader(b"\x00\x06h\xc3\xa9llo").string(False) == "héllo"
    assert Reader(b"\x00").nullable_string(True) is None
    assert Reader(b"\xff\xff").nullable_string(False) is None
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff").string(False)


@pytest.mark.parametrize(("method", "data"), [
    ("int8", b""), ("int16", b"\x00"), ("int32", b"\x00\x00\x00"), ("int64", b"\x00" * 7),
    ("uuid", b"\x00" * 15), ("float64", b"\x00"), ("uvarint", b"\x80"), ("uvarint", b"\x80\x80\x80\x80\x80\x01"),
    ("varlong", b"\xff" * 11),
])
def test_truncated_primitives(method: str, data: bytes) -> None:
    with pytest.raises(ProtocolError):
        getattr(Reader(data), method)()


@pytest.mark.parametrize(("method", "data"), [
    ("string", b"\x00\x05abc"),  # longer than the input
    ("string", b"\xff\xfe"),  # -2
    ("string", b"\x00\x02\xff\xfe"),  # not UTF-8
    ("binary", b"\x7f\xff\xff\xff"),  # 2 GB promised, nothing there
    ("binary", b"\xff\xff\xff\xfe"),
    ("records", b"\x00\x00\x00\x10abc"),
    ("array_length", b"\x00\x10\x00\x00"),  # a million elements in zero bytes
])
def test_lengths_past_the_input(method: str, data: bytes) -> None:
    with pytest.raises(ProtocolError):
        getattr(Reader(data), method)(False)


def test_compact_lengths_past_the_input() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff\x0f").array_length(True)  # 4 billion elements
    with pytest.raises(ProtocolError):
        Reader(b"\x05ab").binary(True)


def test_records_is_a_view_and_bytes_is_a_copy() -> None:
    data = bytearray(b"\x00\x00\x00\x03abc\x00\x00\x00\x03xyz")
    r = Reader(data)
    view = r.records(False)
    copy = r.binary(False)
    data[4] = ord("A")
    data[11] = ord("X")
    assert view == b"Abc"
    assert copy == b"xyz"


def test_tagged_fields_any_order_but_no_repeats() -> None:
    assert Reader(b"\x02\x05\x00\x03\x01a").tagged_fields() == [(5, memoryview(b"")), (3, memoryview(b"a"))]
    with pytest.raises(ProtocolError):
        Reader(b"\x02\x03\x00\x03\x00").tagged_fields()
    assert Reader(b"\x00").tagged_fields() == ()


def test_unknown_tags_out_of_order_are_reencoded_sorted() -> None:
    from grete.protocol.messages import ApiVersionsRequest
    back = ApiVersionsRequest.from_bytes(b"\x02a\x02b" + b"\x02" + b"\x09\x00" + b"\x04\x01z", 3)
    assert back.unknown_tagged_fields == [(9, b""), (4, b"z")]
    assert back.to_bytes(3) == b"\x02a\x02b" + b"\x02" + b"\x04\x01z" + b"\x09\x00"


def test_writer_merges_known_and_unknown_tags_in_order() -> None:
    w = Writer()
    w.tagged_fields([(1, b"k")], [(0, b"u"), (9, b"")])
    assert w.getvalue() == b"\x03" b"\x00\x01u" b"\x01\x01k" b"\x09\x00"
    with pytest.raises(ValueError):
        Writer().tagged_fields([(1, b"")], [(1, b"")])


def test_primitive_arrays() -> None:
    w = Writer()
    w.primitive_array("int32", [1, -1, 7])
    assert w.getvalue() == b"\x00\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x07"
    assert Reader(w.getvalue()).primitive_array("int32", 3) == [1, -1, 7]
    with pytest.raises(ProtocolError):
        Reader(b"\x00\x00\x00").primitive_array("int32", 1)


def test_reserve_and_patch_size_prefix() -> None:
    w = Writer()
    pos = w.reserve_int32()
    w.string("abc", False)
    w.patch_int32(pos, w.nbytes - 4)
    assert w.getvalue() == b"\x00\x00\x00\x05\x00\x03abc"


def test_zero_uuid_default() -> None:
    assert ZERO_UUID.bytes == b"\x00" * 16


@given(st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_uvarint_round_trip(value: int) -> None:
    assert Reader(written("uvarint", value)).uvarint() == value


@given(st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1))
def test_varint_round_trip(value: int) -> None:
    assert Reader(written("varint", value)).varint() == value


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varlong_round_trip(value: int) -> None:
    data = written("varlong", value)
    assert len(data) <= 10
    assert Reader(data).varlong() == value


@given(st.one_of(st.none(), st.text(max_size=200)), st.booleans())
def test_string_round_trip(value: str | None, compact: bool) -> None:
    r = Reader(written("string", value, compact))
    assert r.nullable_string(compact) == value
    assert r.remaining() == 0


@given(st.one_of(st.none(), st.binary(max_size=300)), st.booleans())
def test_bytes_round_trip(value: bytes | None, compact: bool) -> None:
    r = Reader(written("binary", value, compact))
    assert r.nullable_binary(compact) == value


@given(st.binary(max_size=64))
def test_reader_never_raises_anything_but_protocol_error(data: bytes) -> None:
    for method, args in [("uvarint", ()), ("varlong", ()), ("string", (True,)), ("string", (False,)),
                         ("binary", (True,)), ("records", (False,)), ("tagged_fields", ()), ("uuid", ())]:
        try:
            getattr(Reader(data), method)(*args)
        except ProtocolError:
            pass
