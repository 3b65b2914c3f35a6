"""The suite's two lanes under pytest-xdist (``./scripts/test`` runs two workers, ``--dist loadfile``).

The tests that start clusters of processes and kill, pause or partition them run one module at a time
in one lane, so two clusters never compete for this machine's two cores and their timeouts mean what
they say: the scheduler below makes every such module one unit of work, which one worker takes first.
Every other module is a unit of its own that either worker takes, its module-scoped fixtures with it.
Run without xdist, nothing here changes what runs; the lane's modules are only collected first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

CLUSTERS = "clusters"
# Folders and modules whose tests start clusters, quorums or ZooKeeper.
CLUSTER_LANE = ("tests/cluster", "compat-tests/cluster", "tests/jepsen", "tests/ops", "tests/pipelines",
                "tests/broker/test_broker_store.py", "tests/security/test_scram_bootstrap.py")


def in_cluster_lane(module: str) -> bool:
    """``module``: a test file's path relative to the repository, as in a node id."""
    return any(module == folder or module.startswith(folder + "/") for folder in CLUSTER_LANE)


class LaneScheduling(LoadFileScheduling):
    """``--dist loadfile`` with every cluster-lane module in one unit."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return CLUSTERS if in_cluster_lane(module) else module


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    return LaneScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(config.rootpath)

    def lane_first(item: pytest.Item) -> bool:
        try:
            module = Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            return True
        return not in_cluster_lane(module)
    items.sort(key=lane_first)  # stable: the rest keep their order
