"""``franzgo``: the franz-go driver (main.go, built once into the cache) pointed at the session's broker."""

from __future__ import annotations

import pytest

from tools.client_drivers import BoundDriver, Unavailable, go_driver


@pytest.fixture(scope="session")
def franzgo_program():
    try:
        return go_driver("franz-go")
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def franzgo(franzgo_program, broker) -> BoundDriver:
    return BoundDriver(franzgo_program, broker.bootstrap)
