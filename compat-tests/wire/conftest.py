"""What the wire tests share: ``wire``, one connection to the target broker's socket (grete or the
reference Kafka, as compat-tests/conftest.py's ``broker`` starts it), for raw requests; on a cluster,
a connection to each broker, every request sent where a client would send it
(grete/testing/routed_wire.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from grete.testing._wire import Wire
from grete.testing.routed_wire import RoutedWire, open_wire
from tools.kafka_admin import create_topic


@pytest.fixture
def wire(broker: Any) -> Iterator[Wire | RoutedWire]:
    w = open_wire(broker.bootstrap, timeout=30)
    yield w
    w.close()


@pytest.fixture
def make_topic(broker: Any, make_topic: Callable[..., str]) -> Callable[..., str]:
    """compat-tests/conftest.py's, but on a cluster every partition is led by the first broker and
    replicated to the others: a fetch session, or a request naming several partitions, speaks to one
    broker as these tests do on a single node."""
    if broker.nodes == 1:
        return make_topic
    replicas = list(range(1, broker.nodes + 1))

    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topic(broker.bootstrap, name, partitions, config, replicas=replicas)
        return name
    return make
