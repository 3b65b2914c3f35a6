"""pytest plugin (entry point ``grete``): real brokers as fixtures.

* ``grete_broker``: a fresh in-process broker per test (a few ms after the session's first);
  ``grete_broker.faults`` injects faults (see docs/testing.md);
* ``grete_session_broker``: one broker shared by the whole session (faults are cleared after
  each test that used it through ``grete_shared_broker``);
* ``grete_shared_broker``: the session broker, with every fault cleared when the test ends;
* ``grete_broker_process``: a broker in a child process (``grete serve``), for isolation;
* ``@pytest.mark.grete_overrides(**{"num.partitions": "3"})`` sets server.properties keys for
  ``grete_broker`` and ``grete_broker_process``; an unknown key is a setup error naming it;
* ``grete_topic``: a unique topic name, created (1 partition) on the per-test broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from grete.testing import RunningBroker, broker
from grete.testing.process import BrokerProcess, broker_process


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "grete_overrides(**props): server.properties overrides for grete_broker")


def _overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    props: dict[str, str] = {}
    for mark in reversed(list(request.node.iter_markers("grete_overrides"))):
        props.update({k: str(v) for k, v in mark.kwargs.items()})
    return props


# The brokers own their data dirs (on tmpfs where available, see grete.testing.scratch_root) and
# remove them on teardown; set GRETE_TEST_TMPDIR to put them elsewhere.
@pytest.fixture
def grete_broker(request: pytest.FixtureRequest) -> Iterator[RunningBroker]:
    with broker(_overrides(request)) as running:
        yield running


@pytest.fixture(scope="session")
def grete_session_broker() -> Iterator[RunningBroker]:
    with broker() as running:
        yield running


@pytest.fixture
def grete_shared_broker(grete_session_broker: RunningBroker) -> Iterator[RunningBroker]:
    yield grete_session_broker
    grete_session_broker.faults.clear()


@pytest.fixture
def grete_broker_process(request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    with broker_process(_overrides(request)) as child:
        yield child


@pytest.fixture
def grete_topic(grete_broker: RunningBroker) -> str:
    name = f"test-{uuid.uuid4().hex[:12]}"
    grete_broker.create_topic(name, 1)
    return name
