"""pytest plugin (entry point ``grete``): real brokers as fixtures.

* ``grete_broker``: a fresh in-process broker per test;
* ``grete_session_broker``: one broker shared by the whole session;
* ``@pytest.mark.grete_overrides(**{"num.partitions": "3"})`` sets server.properties keys for
  ``grete_broker``;
* ``grete_topic``: a unique topic name, created on the per-test broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from grete.testing import RunningBroker, broker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "grete_overrides(**props): server.properties overrides for grete_broker")


def _overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    props: dict[str, str] = {}
    for mark in reversed(list(request.node.iter_markers("grete_overrides"))):
        props.update({k: str(v) for k, v in mark.kwargs.items()})
    return props


@pytest.fixture
def grete_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker(_overrides(request), data_dir=tmp_path_factory.mktemp("grete")) as running:
        yield running


@pytest.fixture(scope="session")
def grete_session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker(data_dir=tmp_path_factory.mktemp("grete-session")) as running:
        yield running


@pytest.fixture
def grete_topic(grete_broker: RunningBroker) -> str:
    name = f"test-{uuid.uuid4().hex[:12]}"
    grete_broker.create_topic(name, 1)
    return name
