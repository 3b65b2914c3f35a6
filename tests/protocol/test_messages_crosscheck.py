"""Cross-check against an independent codec: kafka-python 3's JSON-schema protocol classes.

grete encodes a random instance, kafka-python decodes and re-encodes it, and the bytes must match,
for every API and version both sides know (kafka-python vendors the Kafka 4.3 specs of ~50 APIs).
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import grete.protocol.messages as messages

kafka_protocol = pytest.importorskip("kafka.protocol")
api_message = pytest.importorskip("kafka.protocol.api_message")


def _kafka_python_classes() -> dict[str, Any]:
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or "generate_stubs" in info.name:
            continue
        importlib.import_module(info.name)

    def walk(cls: Any) -> Iterator[Any]:
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    found: dict[str, Any] = {}
    for cls in walk(api_message.ApiMessage):
        if getattr(cls, "_class_version", None) is None:
            found.setdefault(cls.__name__, cls)
    return found


KP_CLASSES = _kafka_python_classes()
NAMES = sorted(n for n in KP_CLASSES if hasattr(messages, n))


def test_kafka_python_covers_the_client_apis() -> None:
    assert {"ProduceRequest", "FetchResponse", "MetadataResponse", "JoinGroupRequest"} <= set(NAMES)
    assert len(NAMES) >= 80


@pytest.mark.parametrize("name", NAMES)
def test_kafka_python_reencodes_grete_bytes(name: str, make_builder: Callable[[random.Random], Any]) -> None:
    ours = getattr(messages, name)
    theirs = KP_CLASSES[name]
    lo, hi = theirs._valid_versions
    versions = range(max(lo, ours.MIN_VERSION), min(hi, ours.MAX_VERSION) + 1)
    assert versions, f"no common version for {name}"
    for version in versions:
        for i in range(2):
            builder = make_builder(random.Random(f"{name}/{version}/{i}"))
            builder.unknown_tags = False  # kafka-python does not keep unknown tags
            value = builder.message(ours, version)
            if name == "ApiVersionsResponse":
                value.error_code = 0  # kafka-python reads any error response as v0, like Kafka's clients
            data = value.to_bytes(version)
            decoded = theirs.decode(data, version=version)
            decoded._header = None
            assert bytes(decoded.encode(version=version)) == data, f"{name} v{version}"
