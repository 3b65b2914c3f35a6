"""A short run of the Jepsen-style checker against a grete cluster (tests/jepsen/README.md): a few
rounds with faults must show no anomaly; with unclean leader election forced, the checker must
see the acknowledged writes Kafka documents as lost, and none without it."""

from __future__ import annotations

import os
from typing import Any

import pytest

from grete.testing.cluster import zookeeper_available
from tests.jepsen.run import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

IDEMPOTENT = ("lost", "duplicates", "reorders", "two_values")
TRANSACTIONAL = ("aborted_reads", "lost_committed", "partial_txns")


@pytest.fixture(autouse=True)
def _zookeeper() -> None:
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def short_run() -> tuple[dict[str, Any], list[str]]:
    said: list[str] = []
    # A leader killed, a zombie leader paused past its session, a leader cut from ZooKeeper.
    document = run("grete", rounds=3, seed=16, faults=["kill-leader", "pause-leader", "zk-isolate-leader"],
                   say=said.append)
    return document, said


def report(document: dict[str, Any], said: list[str]) -> str:
    notes = [f"round {r['round']}: {n}" for r in document["rounds"] if any(r[k] for k in IDEMPOTENT + TRANSACTIONAL)
             for n in r["notes"][:12]]
    return "\n".join(said + notes)


def test_faults_lose_no_acknowledged_write(short_run: tuple[dict[str, Any], list[str]]) -> None:
    document, said = short_run
    summary = document["summary"]
    assert summary["rounds"] == 3 and summary["errors"] == 0 and summary["acked"] > 1000
    assert {k: summary["anomalies"][k] for k in IDEMPOTENT} == dict.fromkeys(IDEMPOTENT, 0), report(document, said)


def test_faults_keep_transactions_atomic(short_run: tuple[dict[str, Any], list[str]]) -> None:
    document, said = short_run
    summary = document["summary"]
    assert summary["txns_committed"] > 0 and summary["txns_aborted"] > 0
    assert {k: summary["anomalies"][k] for k in TRANSACTIONAL} == dict.fromkeys(TRANSACTIONAL, 0), \
        report(document, said)


@pytest.mark.skipif(not os.environ.get("GRETE_JEPSEN_LONG"),
                    reason="2 x ~135 s: run by hand with GRETE_JEPSEN_LONG=1 (tests/jepsen/README.md)")
@pytest.mark.parametrize("unclean", [True, False], ids=["unclean", "clean"])
def test_unclean_leader_election_loses_acknowledged_writes(unclean: bool) -> None:
    said: list[str] = []
    document = run("grete", rounds=1, seed=16, unclean=unclean, faults=["unclean-election"], say=said.append)
    anomalies = document["summary"]["anomalies"]
    if unclean:
        assert anomalies["lost"] > 0, "\n".join(said + document["rounds"][0]["notes"])
    else:
        assert {k: anomalies[k] for k in IDEMPOTENT} == dict.fromkeys(IDEMPOTENT, 0), \
            "\n".join(said + document["rounds"][0]["notes"])


@pytest.mark.skipif(not os.environ.get("GRETE_JEPSEN_LONG"),
                    reason="~80 s: run by hand with GRETE_JEPSEN_LONG=1 (tests/jepsen/README.md)")
def test_kraft_faults_lose_no_acknowledged_write() -> None:
    """grete controllers and brokers: the quorum leader killed, a leader cut off from the controllers."""
    said: list[str] = []
    document = run("grete-kraft", rounds=2, seed=2, faults=["kill-quorum-leader", "quorum-cut-leader"],
                   say=said.append)
    summary = document["summary"]
    assert summary["rounds"] == 2 and summary["errors"] == 0 and summary["acked"] > 1000
    assert summary["per_fault"].keys() == {"kill-quorum-leader", "quorum-cut-leader"}
    assert summary["anomalies"] == dict.fromkeys(IDEMPOTENT + TRANSACTIONAL, 0), report(document, said)
