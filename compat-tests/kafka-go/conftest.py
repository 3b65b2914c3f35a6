"""``kafkago``: the kafka-go driver (main.go, built once into the cache) pointed at the session's broker."""

from __future__ import annotations

import pytest

from tools.client_drivers import BoundDriver, Unavailable, go_driver


@pytest.fixture(scope="session")
def kafkago_program():
    try:
        return go_driver("kafka-go")
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def kafkago(kafkago_program, broker) -> BoundDriver:
    return BoundDriver(kafkago_program, broker.bootstrap)
