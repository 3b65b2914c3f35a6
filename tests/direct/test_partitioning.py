"""Keys land where Java clients (and kafka-python, which copies Java's murmur2) put them."""

from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as reference

from grete.direct.producer import murmur2


def test_murmur2_matches_kafka_python() -> None:
    rng = random.Random(7)
    for length in range(64):
        for _ in range(5):
            key = bytes(rng.getrandbits(8) for _ in range(length))
            assert murmur2(key) == reference(key), key
