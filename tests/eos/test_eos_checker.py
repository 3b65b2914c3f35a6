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

from tests.eos.brokers import DroppedMarker, parse_dropped_markers, start_broker, target
from tests.eos.checker import Journal, Plan, audit, check, excuse_dropped_markers

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
    if target() == "grete":
        assert report.excused == 0, report.summary()  # grete has no dropped-marker excuse
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


# --- Kafka's dropped marker: excused only with the broker's own admission -----------------------

# The signature seen on Apache Kafka 4.3.1: slot 0's transaction a.2 (begun at t=10, never committed)
# lost its abort marker on p0, so the next incarnation's commit (b.1, same transactional.id) made it
# visible: 2 aborted reads, 2 duplicates, 1 reorder, 1 offset mismatch.
HANGING = {0: [(0, "a.1"), (1, "a.1"), (2, "a.2"), (3, "a.2"), (2, "b.1"), (3, "b.1")]}
TXN_IDS = {"g-txn-0": 0, "g-txn-1": 1}


def hanging_journal() -> Journal:
    j = journal({"a.1": 2, "b.1": 4})
    j.slot.update({"a.1": 0, "a.2": 0, "b.1": 0})
    j.began.update({"a.1": 5.0, "a.2": 10.0, "b.1": 30.0})
    return j


def audit_with(dropped: list[DroppedMarker], j: Journal | None = None) -> tuple[dict[str, int], int]:
    j = j or hanging_journal()
    kept, excused, _notes = excuse_dropped_markers(HANGING, j, dropped, TXN_IDS, "out")
    counts, notes = audit(kept, j, {0: 4}, PLAN)
    return counts, excused


def test_hanging_transaction_is_caught_without_evidence() -> None:
    counts, excused = audit_with([])
    assert excused == 0
    assert counts == {**ZERO, "aborted_reads": 2, "duplicates": 2, "reorders": 1, "offset_mismatches": 1}


def test_hanging_transaction_is_excused_by_the_brokers_admission() -> None:
    counts, excused = audit_with([DroppedMarker("g-txn-0", "out", 0, at=20.0)])
    assert (counts, excused) == (ZERO, 2)


@pytest.mark.parametrize("dropped", [
    DroppedMarker("g-txn-0", "out", 1, at=20.0),  # another partition
    DroppedMarker("g-txn-1", "out", 0, at=20.0),  # another transactional.id
    DroppedMarker("g-txn-0", "in", 0, at=20.0),  # another topic
    DroppedMarker("g-txn-0", "out", 0, at=7.0),  # before a.2 began: the open one was a.1 (committed)
    DroppedMarker("other-txn-0", "out", 0, at=20.0),  # not one of this run's producers
])
def test_admission_must_name_the_open_transaction_and_partition(dropped: DroppedMarker) -> None:
    counts, excused = audit_with([dropped])
    assert excused == 0
    assert counts["aborted_reads"] == 2 and counts["duplicates"] == 2


def test_admission_never_excuses_a_transaction_that_reached_its_commit() -> None:
    # a.2 journaled its commit intent: its records becoming visible is no dropped-abort story, and
    # its duplicates of b.1 must still count.
    j = hanging_journal()
    j.commit_offsets["a.2"] = {0: 4}
    counts, excused = audit_with([DroppedMarker("g-txn-0", "out", 0, at=20.0)], j)
    assert excused == 0
    assert counts["duplicates"] == 2 and counts["reorders"] == 1


def test_parse_kafka_dropped_marker_lines() -> None:
    log = (
        "[2026-11-21 06:18:50,456] WARN [TransactionCoordinator id=1] Connection to node 1 could not be "
        "established. (org.apache.kafka.clients.NetworkClient)\n"
        "[2026-11-21 06:18:50,480] INFO [Transaction Marker Channel Manager 1]: Couldn't find leader "
        "endpoint for partitions Set(eos-out-2-ab-0, eos-out-2-ab-3) while trying to send transaction "
        "markers for eos-2-ab-txn-0, these partitions are likely deleted already and hence can be "
        "skipped (kafka.coordinator.transaction.TransactionMarkerChannelManager)\n"
    )
    got = parse_dropped_markers(log)
    assert [(d.txn_id, d.topic, d.partition) for d in got] == [
        ("eos-2-ab-txn-0", "eos-out-2-ab", 0), ("eos-2-ab-txn-0", "eos-out-2-ab", 3)]
    assert got[0].at == got[1].at
    assert parse_dropped_markers(log.splitlines()[0]) == []
