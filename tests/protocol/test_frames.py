"""Frame splitting: any chunking of the stream yields the same frames; limits are enforced early."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grete.protocol.errors import FrameTooLarge, ProtocolError
from grete.protocol.framing import FrameReader


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1))
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = framed(payloads)
    reader = FrameReader()
    frames: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        frames += [bytes(f) for f in reader.feed(data[pos:pos + step])]
        pos += step
        i += 1
    assert frames == payloads
    assert reader.pending == 0


def test_buffered_protocol_interface() -> None:
    """The connection's way: receive into the reader's buffer, take whole frames, settle."""
    rng = random.Random(1)
    payloads = [rng.randbytes(rng.randint(0, 70000)) for _ in range(40)]
    data = framed(payloads)
    reader = FrameReader()
    frames = []
    pos = 0
    while pos < len(data):
        buf = reader.buffer()
        assert buf is not None and len(buf) > 0
        n = min(len(buf), rng.randint(1, 100000), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        reader.received(n)
        while (frame := reader.next_frame()) is not None:
            frames.append(bytes(frame))  # a view is valid until the next call into the reader
        reader.settle()
    assert frames == payloads and reader.pending == 0


def test_large_frame_is_received_whole() -> None:
    payload = bytes(3 * 1024 * 1024)
    reader = FrameReader()
    assert reader.feed(len(payload).to_bytes(4, "big") + payload[:10]) == []
    frames = reader.feed(payload[10:])
    assert len(frames) == 1 and len(frames[0]) == len(payload)


def test_too_large_is_rejected_before_allocating() -> None:
    reader = FrameReader(max_frame=1000)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge) as info:
            reader.feed(b"\x7f\xff\xff\xff")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.size == 0x7FFFFFFF and info.value.maximum == 1000
    assert peak < 1_000_000
    assert FrameReader(max_frame=4).feed(b"\x00\x00\x00\x04abcd") == [memoryview(b"abcd")]


def test_negative_size_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameReader().feed(b"\xff\xff\xff\xfe")


def test_empty_frame_and_partial_prefix() -> None:
    reader = FrameReader()
    assert reader.feed(b"\x00\x00") == []
    assert [bytes(f) for f in reader.feed(b"\x00\x00\x00\x00\x00\x01x")] == [b"", b"x"]
