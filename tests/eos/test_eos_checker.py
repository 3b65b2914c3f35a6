"""The exactly-once checker (tests/eos/checker.py): the crash run on a real broker (slow tier), and
quick tests that the audit itself notices each kind of anomaly.

    pytest tests/eos -m slow                            # on grete (GRETE_TEST_TARGET unset)
    GRETE_TEST_TARGET=kafka-4 pytest tests/eos -m slow  # the same run on Apache Kafka 4.x
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.eos.brokers import start_broker, target
from tests.eos.checker import Journal, Plan, audit, check

ZERO = {"aborted_reads": 0, "duplicates": 0, "lost": 0, "lost_txns": 0, "reorders": 0, "offset_mismatches": 0}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_exactly_once_under_worker_and_broker_crashes() -> None:
    plan = Plan(broker_kill_at=(5.0, 12.0))
    # Journals and worker logs (with faulthandler stacks of stalled workers) stay after a failure.
    workdir = Path(tempfile.mkdtemp(prefix="eos-"))
    broker = start_broker()
    try:
        report = check(broker, plan, workdir=workdir)
    except BaseException:
        print(f"\n{broker.kind} log tail:\n{broker.log_tail(60)}\nworker logs: {workdir}")
        raise
    finally:
        broker.stop()
    print(f"\n{target()}: {report.summary()}")
    assert report.anomalies == ZERO, report.summary()
    assert report.visible == report.expected
    # The run must really have exercised what it claims (otherwise zero anomalies proves little).
    assert report.chaos.worker_kills >= 3 and report.chaos.kills_mid_txn >= 1, report.summary()
    assert report.chaos.broker_kills >= 1, report.summary()
    assert report.aborted_txns > 0 and report.aborted_records_in_log > 0, report.summary()
    shutil.rmtree(workdir, ignore_errors=True)


# --- the audit on hand-made histories (no broker) --------------------------------------------

PLAN = Plan(partitions=1, per_partition=4)


def journal(commits: dict[str, int], aborted: tuple[str, ...] = ()) -> Journal:
    j = Journal()
    for tag, offset in commits.items():
        j.commit_offsets[tag] = {0: offset}
        j.committed.add(tag)
    j.aborted.update(aborted)
    return j


def test_audit_clean_history() -> None:
    visible = {0: [(0, "a.1"), (1, "a.1"), (2, "b.1"), (3, "b.1")]}
    counts, notes = audit(visible, journal({"a.1": 2, "b.1": 4}), {0: 4}, PLAN)
    assert counts == ZERO, notes


def test_audit_counts_each_anomaly() -> None:
    # b.1 was aborted yet visible; seq 1 twice; seq 3 missing; 0 after 1; c.1 committed but invisible.
    visible = {0: [(1, "a.1"), (0, "a.1"), (1, "b.1"), (2, "b.1")]}
    j = journal({"a.1": 2, "b.1": 3, "c.1": 4}, aborted=("b.1",))
    counts, _notes = audit(visible, j, {0: 4}, PLAN)
    assert counts["aborted_reads"] == 2
    assert counts["duplicates"] == 1
    assert counts["lost"] == 1
    assert counts["lost_txns"] == 1
    assert counts["reorders"] == 1
    assert counts["offset_mismatches"] == 2  # a.1 wrote [1, 0] for [0, 2); b.1 wrote [1, 2] for [2, 3)


def test_audit_offsets_must_match_output() -> None:
    # Output complete and in order, but the group offset claims only 3 of 4 were consumed.
    visible = {0: [(0, "a.1"), (1, "a.1"), (2, "a.1"), (3, "a.1")]}
    counts, _ = audit(visible, journal({"a.1": 4}), {0: 3}, PLAN)
    assert counts == {**ZERO, "offset_mismatches": 1}
    counts, _ = audit(visible, journal({"a.1": 3}), {0: 4}, PLAN)
    assert counts["offset_mismatches"] == 1
