"""A bounded fuzz pass in the suite: mutated valid frames through the fuzz target's checks."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grete.protocol.codec import Writer
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import APIS


def seed_frames(make_builder: Callable[[random.Random], Any], rng: random.Random) -> list[bytes]:
    """One valid request frame per API and version, with random field values."""
    builder = make_builder(rng)
    seeds = []
    for info in APIS.values():
        for version in range(info.min_version, info.max_version + 1):
            w = Writer()
            pos = w.reserve_int32()
            encode_request_header(w, RequestHeader(api_key=info.key, api_version=version,
                                                   correlation_id=rng.randint(0, 1000), client_id="fuzz"))
            builder.message(info.request, version).encode(w, version)
            w.patch_int32(pos, w.nbytes - 4)
            seeds.append(w.getvalue())
    return seeds


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and buf:  # flip bits
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # interesting byte
            buf[rng.randrange(len(buf))] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
        elif op == 2:  # truncate
            del buf[rng.randrange(len(buf) + 1):]
        elif op == 3:  # insert random bytes
            at = rng.randrange(len(buf) + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif buf:  # overwrite a 4-byte window with a large/negative length
            at = rng.randrange(len(buf))
            buf[at:at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x00\x00\x10\x00"])
    return bytes(buf)


def test_mutated_frames(make_builder: Callable[[random.Random], Any],
                        fuzz_one_input: Callable[[bytes], None]) -> None:
    rng = random.Random(99)
    seeds = seed_frames(make_builder, rng)
    runs = 0
    for _ in range(6000):
        seed = rng.choice(seeds)
        if rng.random() < 0.25:
            fuzz_one_input(b"\x01" + mutate(seed, rng))  # the size prefix may be hit too
        else:
            body = mutate(seed[4:], rng)  # keep the frame whole so the body decoders see it
            fuzz_one_input(b"\x01" + len(body).to_bytes(4, "big") + body)
        # Same bytes as a bare body of the frame's api/version: exercises the decoders past the header.
        api_key = int.from_bytes(seed[4:6], "big")
        version = int.from_bytes(seed[6:8], "big")
        keys = sorted(APIS)
        info = APIS[api_key]
        fuzz_one_input(b"\x00" + bytes([keys.index(api_key), version - info.min_version])
                       + mutate(seed[4:], rng))
        runs += 2
    assert runs == 12000


def test_concatenated_valid_frames_all_decode(make_builder: Callable[[random.Random], Any],
                                              fuzz_module: Any) -> None:
    # The target is not vacuous: valid frames really reach the body decoders.
    seeds = seed_frames(make_builder, random.Random(5))
    decoded = []
    original = fuzz_module.APIS
    from grete.protocol.framing import FrameReader
    from grete.protocol.headers import decode_request_header
    for frame in FrameReader().feed(b"".join(seeds)):
        header, offset = decode_request_header(frame)
        decoded.append(original[header.api_key].request.from_bytes(frame[offset:], header.api_version))
    assert len(decoded) == len(seeds)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes(fuzz_one_input: Callable[[bytes], None], data: bytes) -> None:
    fuzz_one_input(data)


@pytest.mark.slow
def test_long_mutation_run(make_builder: Callable[[random.Random], Any],
                           fuzz_one_input: Callable[[bytes], None]) -> None:
    rng = random.Random(2024)
    seeds = seed_frames(make_builder, rng)
    for _ in range(200_000):
        fuzz_one_input(b"\x01" + mutate(rng.choice(seeds), rng))
