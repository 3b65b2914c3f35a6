"""Cluster targets: the same test body against 3 grete brokers and 3 Apache Kafka 3.9.2 brokers,
each on its own Debian ZooKeeper.

``cluster_target`` is module-scoped and parametrized over ``grete`` and ``kafka-3.9-zk`` (the Kafka
cells are marked ``slow``): every test file gets a fresh cluster per target, and pytest runs all of
a file's grete cells before its Kafka cells, so at most one cluster runs at a time. As in every
compat folder, the default run is grete's; ``--target=kafka-3.9`` runs the Kafka 3.9.2 cells.

``@pytest.mark.grete_xfail(reason)`` marks a test's grete cell ``xfail(strict=True, raises=AssertionError)``: a grete bug,
described in FINDINGS.md. The Kafka cell stays a plain test, so the test itself is checked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping

import pytest
from cluster_targets import GRETE, KAFKA, OVERRIDES, ClusterTarget, await_full_metadata, start_cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "grete_xfail(reason): the grete cell is xfail(strict=True) (a grete bug)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("cluster_target") != GRETE:
            continue
        for mark in item.iter_markers("grete_xfail"):
            reason = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "grete bug")
            # raises=AssertionError: a grete bug shows as a failed check; anything else (a cluster that
            # did not start, a client exception in setup) stays an error instead of hiding in the xfail.
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason, raises=AssertionError))


def _module_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    items = dict(OVERRIDES)
    marker = request.module.__dict__.get("CLUSTER_OVERRIDES")
    if isinstance(marker, Mapping):
        items.update({str(k): str(v) for k, v in marker.items()})
    return items


@pytest.fixture(scope="module", params=[pytest.param(GRETE, id=GRETE),
                                        pytest.param(KAFKA, id=KAFKA, marks=pytest.mark.slow)])
def cluster_target(request: pytest.FixtureRequest) -> Iterator[ClusterTarget]:
    """A fresh 3-broker cluster per test file and target. A module may set CLUSTER_OVERRIDES (a dict)
    for extra broker config on both targets."""
    name = str(request.param)
    chosen = request.config.getoption("--target", default=None) or os.environ.get("GRETE_TEST_TARGET") or "grete"
    # As every compat folder: grete by default, the reference with --target=kafka-3.9 (Kafka 4 has
    # no ZooKeeper mode). Keeps the default suite from starting three JVM clusters.
    if name == KAFKA and chosen != "kafka-3.9":
        pytest.skip("the Kafka 3.9.2 cluster cells run with --target=kafka-3.9")
    if name == GRETE and chosen != "grete":
        pytest.skip(f"grete cells do not run with --target={chosen}")
    t0 = time.monotonic()
    with start_cluster(name, _module_overrides(request)) as running:
        await_full_metadata(running)
        yield ClusterTarget(name, running, time.monotonic() - t0)
