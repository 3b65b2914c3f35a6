"""The suite's two lanes under pytest-xdist (``./scripts/test`` runs two workers, ``--dist loadgroup``).

The tests that start clusters of processes and kill, pause or partition them run one module at a time
in one lane, so two clusters never compete for this machine's two cores and their timeouts mean what
they say; they are collected first so that lane starts at once. Every other module is a unit of its
own that either worker takes, its module-scoped fixtures with it. Run without xdist, the marks change
nothing and the order is only the lane's first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Folders and modules whose tests start clusters, quorums or ZooKeeper.
CLUSTER_LANE = ("tests/cluster", "compat-tests/cluster", "tests/jepsen", "tests/ops", "tests/pipelines",
                "tests/broker/test_broker_store.py", "tests/security/test_scram_bootstrap.py")


def _lane(root: Path, item: pytest.Item) -> str | None:
    try:
        relative = Path(str(item.path)).relative_to(root).as_posix()
    except ValueError:
        return None
    if any(relative == folder or relative.startswith(folder + "/") for folder in CLUSTER_LANE):
        return "clusters"
    return relative


@pytest.hookimpl(tryfirst=True)  # before xdist's worker turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(config.rootpath)
    lanes = {id(item): _lane(root, item) for item in items}
    for item in items:
        lane = lanes[id(item)]
        if lane is not None:
            item.add_marker(pytest.mark.xdist_group(lane))
    items.sort(key=lambda item: lanes[id(item)] != "clusters")  # stable: the rest keep their order
