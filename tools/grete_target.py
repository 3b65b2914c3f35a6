"""The grete side of a compat test that starts its own broker with settings of its own: the single
node (``--target=grete``) or a 3-broker grete KRaft cluster (``--target=grete-kraft``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from grete.testing import broker
from grete.testing.cluster import cluster


@contextmanager
def grete_target(target: str, overrides: dict[str, str]) -> Iterator[str]:
    """The target's bootstrap servers, every broker started with ``overrides``."""
    if target == "grete-kraft":
        with cluster(3, controllers=1, overrides=overrides) as running:
            yield running.bootstrap_servers
        return
    with broker(overrides, subprocess=True) as single:
        yield single.bootstrap_servers
