"""``kafkajs``: the KafkaJS driver (driver.js, run with node from this folder's node_modules)
pointed at the session's broker."""

from __future__ import annotations

import pytest

from tools.client_drivers import BoundDriver, Unavailable, node_driver


@pytest.fixture(scope="session")
def kafkajs_program():
    try:
        return node_driver("kafkajs", "driver.js")
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def kafkajs(kafkajs_program, broker) -> BoundDriver:
    return BoundDriver(kafkajs_program, broker.bootstrap)
