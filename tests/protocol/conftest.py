"""Shared helpers for the protocol tests: a random-instance builder driven by the generated ``_FIELDS``."""

from __future__ import annotations

import importlib.util
import random
import string
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from grete.protocol.codec import FieldSpec, Message, Struct
from grete.protocol.messages import APIS
from grete.protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription

HERE = Path(__file__).parent

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
_TEXT = string.ascii_letters + string.digits + "-._ éß€漢🙂"


def all_message_classes() -> list[type[Message]]:
    classes: list[type[Message]] = []
    for info in APIS.values():
        classes += [info.request, info.response]
    return classes + [ConsumerProtocolSubscription, ConsumerProtocolAssignment]


def message_versions() -> Iterator[tuple[type[Message], int]]:
    for cls in all_message_classes():
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            yield cls, v


class Builder:
    """Builds instances with random, version-valid values for every field present at a version."""

    def __init__(self, rng: random.Random, unknown_tags: bool = True) -> None:
        self.rng = rng
        self.unknown_tags = unknown_tags

    def message(self, cls: type[Message], version: int) -> Message:
        built = self.struct(cls, cls, version, depth=0)
        assert isinstance(built, Message)
        return built

    def struct(self, top: type[Message], cls: type[Struct], version: int, depth: int) -> Struct:
        values: dict[str, Any] = {}
        for spec in cls._FIELDS:
            if version in spec.versions:
                values[spec.name] = self.field(top, spec, version, depth)
        if self.unknown_tags and self._flexible(top, version) and self.rng.random() < 0.3:
            # Tags far above any Kafka uses, in wire order: must come back unchanged.
            tags = sorted(self.rng.sample(range(1000, 1100), self.rng.randint(1, 2)))
            values["unknown_tagged_fields"] = [(t, self.rng.randbytes(self.rng.randint(0, 5))) for t in tags]
        return cls(**values)

    @staticmethod
    def _flexible(top: type[Message], version: int) -> bool:
        return top.FLEXIBLE_FROM is not None and version >= top.FLEXIBLE_FROM

    def field(self, top: type[Message], spec: FieldSpec, version: int, depth: int) -> Any:
        rng = self.rng
        if version in spec.nullable and rng.random() < 0.2:
            return None
        if spec.array:
            count = rng.randint(0, 3 if depth < 3 else 1)
            return [self.scalar(top, spec, version, depth + 1) for _ in range(count)]
        return self.scalar(top, spec, version, depth + 1)

    def scalar(self, top: type[Message], spec: FieldSpec, version: int, depth: int) -> Any:
        rng = self.rng
        kind = spec.kind
        if kind in _INT_RANGES:
            lo, hi = _INT_RANGES[kind]
            return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
        if kind == "float64":
            return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)])
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        if kind == "string":
            return "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 12)))
        if kind in ("bytes", "records"):
            return rng.randbytes(rng.randint(0, 40))
        if kind == "struct":
            assert spec.struct is not None
            return self.struct(top, getattr(top, spec.struct), version, depth)
        raise AssertionError(f"unknown kind {kind}")


@pytest.fixture(scope="session")
def make_builder() -> Callable[[random.Random], Builder]:
    """Builder factory (tests import nothing from conftest: other conftest modules share its name)."""
    return Builder


def _load_fuzz_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grete_fuzz_requests", HERE / "fuzz_requests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def fuzz_one_input() -> Callable[[bytes], None]:
    """The atheris target of tests/protocol/fuzz_requests.py, for bounded in-suite runs."""
    module = _load_fuzz_module()
    target: Callable[[bytes], None] = module.check_input
    return target


@pytest.fixture(scope="session")
def fuzz_module() -> ModuleType:
    return _load_fuzz_module()
