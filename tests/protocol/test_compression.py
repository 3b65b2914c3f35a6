"""Codecs: round trips, Kafka's framings (xerial snappy, lz4 frames), corruption and bomb guards.

kafka-python's codec module is the independent oracle for the framings (its xerial framing and
lz4/zstd paths use python-snappy, lz4 and zstandard, not our code).
"""

from __future__ import annotations

import gzip
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records import compression as c

CODECS = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
PAYLOAD = os.urandom(5000) + b"kafka " * 40000  # > several xerial / lz4 blocks


@pytest.mark.parametrize("codec", [c.NONE, *CODECS])
def test_round_trip(codec: int) -> None:
    assert c.decompress(codec, c.compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS)
def test_empty_input_round_trips(codec: int) -> None:
    assert c.decompress(codec, c.compress(codec, b"")) == b""


def test_gzip_is_rfc1952() -> None:
    assert gzip.decompress(c.compress(c.GZIP, PAYLOAD)) == PAYLOAD
    assert c.decompress(c.GZIP, gzip.compress(PAYLOAD)) == PAYLOAD


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    out = c.compress(c.SNAPPY, PAYLOAD)
    magic, version, compat = struct.unpack_from(">8sii", out)
    assert (magic, version, compat) == (b"\x82SNAPPY\x00", 1, 1)
    blocks = 0
    pos = 16
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        pos += 4 + length
        blocks += 1
    assert pos == len(out)
    assert blocks == -(-len(PAYLOAD) // (32 * 1024))


def test_snappy_reads_raw_block_and_framed_format() -> None:
    import cramjam

    assert c.decompress(c.SNAPPY, bytes(cramjam.snappy.compress_raw(PAYLOAD))) == PAYLOAD
    assert c.decompress(c.SNAPPY, bytes(cramjam.snappy.compress(PAYLOAD))) == PAYLOAD


def test_lz4_frame_has_independent_blocks() -> None:
    out = c.compress(c.LZ4, PAYLOAD)
    assert out[:4] == b"\x04\x22\x4d\x18"
    flags = out[4]
    assert flags >> 6 == 1  # frame version 01
    assert flags & 0x20  # block independence: Java decodes each block on its own


def test_kafka_python_reads_ours_and_we_read_theirs() -> None:
    codec = pytest.importorskip("kafka.codec")
    if not (codec.has_snappy() and codec.has_lz4() and codec.has_zstd()):
        pytest.skip("kafka-python without snappy/lz4/zstd support")
    assert codec.snappy_decode(c.compress(c.SNAPPY, PAYLOAD)) == PAYLOAD
    assert c.decompress(c.SNAPPY, codec.snappy_encode(PAYLOAD)) == PAYLOAD
    assert c.decompress(c.SNAPPY, codec.snappy_encode(PAYLOAD, xerial_compatible=False)) == PAYLOAD
    assert codec.lz4_decode(c.compress(c.LZ4, PAYLOAD)) == PAYLOAD
    assert c.decompress(c.LZ4, codec.lz4_encode(PAYLOAD)) == PAYLOAD
    assert codec.zstd_decode(c.compress(c.ZSTD, PAYLOAD)) == PAYLOAD
    assert c.decompress(c.ZSTD, codec.zstd_encode(PAYLOAD)) == PAYLOAD
    assert codec.gzip_decode(c.compress(c.GZIP, PAYLOAD)) == PAYLOAD


def test_lz4_with_content_size_and_checksums_decodes() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    data = lz4_frame.compress(PAYLOAD, store_size=True, content_checksum=True, block_linked=True)
    assert c.decompress(c.LZ4, data) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_guard_rejects_output_beyond_limit(codec: int) -> None:
    bomb = c.compress(codec, bytes(10_000_000))
    assert len(bomb) < 1_000_000
    with pytest.raises(KafkaError) as info:
        c.decompress(codec, bomb, max_output=1_000_000)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert len(c.decompress(codec, bomb, max_output=10_000_000)) == 10_000_000


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_is_corrupt_message(codec: int) -> None:
    with pytest.raises(KafkaError) as info:
        c.decompress(codec, b"definitely not compressed")
    if codec == c.SNAPPY:  # the same garbage as a xerial block
        with pytest.raises(KafkaError) as info:
            c.decompress(codec, struct.pack(">8sii", b"\x82SNAPPY\x00", 1, 1) + struct.pack(">i", 25)
                         + b"definitely not compressed")
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_stream_is_corrupt_message(codec: int) -> None:
    data = c.compress(codec, PAYLOAD)
    with pytest.raises(KafkaError) as info:
        c.decompress(codec, data[: len(data) // 2])
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_codec() -> None:
    with pytest.raises(KafkaError) as info:
        c.decompress(5, b"x")
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as info:
        c.compress(7, b"x")
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_xxh32_matches_reference_library() -> None:
    xxhash = pytest.importorskip("xxhash")
    for n in range(16):
        data = os.urandom(n)
        assert c.xxh32_short(data) == xxhash.xxh32_intdigest(data)


def test_lz4_header_checksum_variants() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    frame = lz4_frame.compress(PAYLOAD, store_size=True)  # 8-byte content size in the descriptor
    assert c.lz4_set_header_checksum(frame, broken=False) == frame
    broken = c.lz4_set_header_checksum(frame, broken=True)
    assert broken != frame
    assert c.lz4_set_header_checksum(broken, broken=False) == frame


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=70_000), codec=st.sampled_from(CODECS))
def test_property_round_trip(data: bytes, codec: int) -> None:
    assert c.decompress(codec, c.compress(codec, data)) == data


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), codec=st.sampled_from(CODECS))
def test_property_random_input_never_raises_anything_else(data: bytes, codec: int) -> None:
    try:
        c.decompress(codec, data, max_output=1 << 20)
    except KafkaError as exc:
        assert exc.code == ErrorCode.CORRUPT_MESSAGE
