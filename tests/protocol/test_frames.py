"""Frame splitting: any chunking of the stream yields the same frames; limits are enforced early."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grete.protocol.errors import FrameTooLarge, ProtocolError
from grete.protocol.frames import FrameSplitter


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1))
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = framed(payloads)
    splitter = FrameSplitter()
    frames: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        frames += [bytes(f) for f in splitter.feed(data[pos:pos + step])]
        pos += step
        i += 1
    assert frames == payloads
    assert splitter.pending == 0


def test_buffered_protocol_interface_and_frames_stay_valid() -> None:
    rng = random.Random(1)
    payloads = [rng.randbytes(rng.randint(0, 70000)) for _ in range(40)]
    data = framed(payloads)
    splitter = FrameSplitter()
    frames = []
    pos = 0
    while pos < len(data):
        buf = splitter.get_buffer(-1)
        n = min(len(buf), rng.randint(1, 100000), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        frames += splitter.buffer_updated(n)
    # Frames handed out earlier were never overwritten by later reads.
    assert [bytes(f) for f in frames] == payloads


def test_large_frame_is_received_in_one_buffer() -> None:
    payload = bytes(3 * 1024 * 1024)
    splitter = FrameSplitter()
    frames = splitter.feed(len(payload).to_bytes(4, "big") + payload[:10])
    assert not frames
    assert len(splitter.get_buffer()) >= len(payload) - 10
    frames = splitter.feed(payload[10:])
    assert len(frames) == 1 and len(frames[0]) == len(payload)


def test_too_large_is_rejected_before_allocating() -> None:
    splitter = FrameSplitter(max_size=1000)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge) as info:
            splitter.feed(b"\x7f\xff\xff\xff")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.size == 0x7FFFFFFF and info.value.maximum == 1000
    assert peak < 1_000_000
    assert FrameSplitter(max_size=4).feed(b"\x00\x00\x00\x04abcd") == [memoryview(b"abcd")]


def test_negative_size_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameSplitter().feed(b"\xff\xff\xff\xfe")


def test_empty_frame_and_partial_prefix() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(b"\x00\x00") == []
    assert [bytes(f) for f in splitter.feed(b"\x00\x00\x00\x00\x00\x01x")] == [b"", b"x"]
