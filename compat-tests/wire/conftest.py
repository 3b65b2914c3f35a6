"""What the wire tests share: ``wire``, one connection to the target broker's socket (grete or the
reference Kafka, as compat-tests/conftest.py's ``broker`` starts it), for raw requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from grete.testing._wire import Wire


@pytest.fixture
def wire(broker: Any) -> Iterator[Wire]:
    host, port = broker.address
    w = Wire(host, int(port), timeout=30)
    yield w
    w.close()
