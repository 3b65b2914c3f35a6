"""A short run of the Jepsen-style checker against a grete cluster (tests/jepsen/README.md): a few
rounds with faults must show no anomaly; with unclean leader election forced, the checker must
see the acknowledged writes Kafka documents as lost, and none without it."""

from __future__ import annotations

import pytest

from grete.testing.cluster import zookeeper_available
from tests.jepsen.run import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(autouse=True)
def _zookeeper() -> None:
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)


def lines() -> list[str]:
    return []


def test_faults_leave_no_anomaly() -> None:
    said = lines()
    # A leader killed, a zombie leader paused past its session, a leader cut from ZooKeeper.
    document = run("grete", rounds=3, seed=16, faults=["kill-leader", "pause-leader", "zk-isolate-leader"],
                   say=said.append)
    summary = document["summary"]
    assert summary["rounds"] == 3 and summary["errors"] == 0 and summary["acked"] > 1000 and summary["txns_committed"] > 0
    assert not any(summary["anomalies"].values()), "\n".join(said)


@pytest.mark.parametrize("unclean", [True, False], ids=["unclean", "clean"])
def test_unclean_leader_election_loses_acknowledged_writes(unclean: bool) -> None:
    said = lines()
    document = run("grete", rounds=1, seed=16, unclean=unclean, faults=["unclean-election"], say=said.append)
    lost = document["summary"]["anomalies"]["lost"]
    if unclean:
        assert lost > 0, "\n".join(said + document["rounds"][0]["notes"])
    else:
        assert not any(document["summary"]["anomalies"].values()), "\n".join(said + document["rounds"][0]["notes"])
