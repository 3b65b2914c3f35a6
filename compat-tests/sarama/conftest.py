"""``sarama_client``: the sarama driver (main.go, built once into the cache) pointed at the session's broker."""

from __future__ import annotations

import pytest

from tools.client_drivers import BoundDriver, Unavailable, go_driver


@pytest.fixture(scope="session")
def sarama_program():
    try:
        return go_driver("sarama")
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def sarama_client(sarama_program, broker) -> BoundDriver:
    return BoundDriver(sarama_program, broker.bootstrap)
