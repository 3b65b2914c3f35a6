"""Snapshots of the metadata log in a KRaft cluster, and a broker that joins one by FetchSnapshot.

Three controllers snapshot their state often (``metadata.log.max.record.bytes.between.snapshots=1``,
small segments, ``metadata.max.retention.ms=1000``: Kafka's rule then lets the log start move past
older snapshots). A first broker creates topics (one with a config override) and writes; then a new
broker joins with an empty metadata log: the leader answers its first fetch with a snapshot id (a
Kafka leader does so as soon as any snapshot exists), the broker fetches the snapshot with
FetchSnapshot, loads it, fetches the log after it, and serves the topics it learned from it: their
config, a new topic of replication factor 2 across both brokers, everything read back through it.

Run with grete controllers and grete brokers (the suite); a grete broker joining Kafka 4.3.1's
controllers, a Kafka broker joining grete's, and Kafka alone as the reference (``-m long``). With
grete controllers, a controller restarted after its log start moved starts from its own snapshot and
rejoins the quorum.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from grete.storage.checkpoint_file import parse_snapshot_file_name, snapshot_file_name
from tools import kafka_dist
from tools.kraft_quorum import (
    KAFKA,
    GreteBroker,
    KafkaBroker,
    Quorum,
    Voter,
    consume,
    produce,
    start_grete_broker,
    start_kafka_broker,
    start_quorum,
    wait_for,
)

pytestmark = pytest.mark.slow

SNAPSHOT_OFTEN = {"metadata.log.max.record.bytes.between.snapshots": "1", "metadata.max.retention.ms": "1000",
                  "internal.metadata.log.segment.bytes": "8192"}
TOPICS = [f"before-{i}" for i in range(8)]
RETENTION = "123456789"


def _snapshots(voter: Voter | GreteBroker | KafkaBroker) -> list[tuple[int, int]]:
    """(end offset, epoch) of the node's metadata snapshots, the bootstrap one left out."""
    partition = voter.data / "__cluster_metadata-0"
    found = (parse_snapshot_file_name(p.name) for p in partition.glob("*.checkpoint"))
    return sorted(f for f in found if f is not None and f != (0, 0))


def _log_moved(voter: Voter) -> bool:
    """Whether a grete voter's metadata log start moved past an older snapshot (its log says so)."""
    return "the log now starts at" in voter.log.read_text(errors="replace")


def _shell(snapshot: Path, *command: str) -> str:
    # kafka-metadata-shell races itself on a snapshot file: its file reader makes the high watermark
    # known only once it has read to the end; a loader that took the last records before that never
    # counts them as applied, and the shell waits for that count for ever. Bounded, started again.
    for _ in range(3):
        try:
            done = kafka_dist.run_java(kafka_dist.shell_cmd(KAFKA, "--snapshot", str(snapshot), *command),
                                       capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            continue
        assert done.returncode == 0, done.stderr
        return done.stdout
    raise AssertionError(f"kafka-metadata-shell did not finish on {snapshot} in three tries")


def _broker(kind: str, quorum: Quorum, node_id: int, workdir: Path) -> GreteBroker | KafkaBroker:
    start = start_grete_broker if kind == "grete" else start_kafka_broker
    return start(quorum, node_id, workdir, {"metadata.log.max.record.bytes.between.snapshots": "1",
                                            "offsets.topic.replication.factor": "1",
                                            "transaction.state.log.replication.factor": "1",
                                            "transaction.state.log.min.isr": "1"})


def _listed(broker: GreteBroker | KafkaBroker) -> set[int] | None:
    try:
        return set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001 - not up yet
        return None


def _topics(broker: GreteBroker | KafkaBroker) -> set[str]:
    try:
        return set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics)
    except Exception:  # noqa: BLE001 - not up yet
        return set()


def _retention(broker: GreteBroker | KafkaBroker, topic: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entry = admin.describe_configs([resource])[resource].result(10).get("retention.ms")
    except Exception:  # noqa: BLE001 - not known there yet
        return None
    return None if entry is None else str(entry.value)


@pytest.mark.parametrize(("controllers", "first", "joiner"), [
    ("grete", "grete", "grete"),
    pytest.param("kafka", "kafka", "grete", marks=pytest.mark.long),
    pytest.param("grete", "grete", "kafka", marks=pytest.mark.long),
    pytest.param("kafka", "kafka", "kafka", marks=pytest.mark.long),  # the reference
], ids=lambda v: v)
def test_a_new_broker_joins_by_fetching_a_snapshot(started: list[Any], tmp_path: Path, controllers: str,
                                                   first: str, joiner: str) -> None:
    quorum = start_quorum([controllers] * 3, tmp_path / "quorum", lambda _kind: dict(SNAPSHOT_OFTEN))
    started.append(quorum)
    leader_id = quorum.leader_view().leader_id
    one = _broker(first, quorum, 10, tmp_path / "broker10")
    started.append(one)
    wait_for(lambda: _listed(one) == {10}, 120, "the first broker registered")
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    futures = admin.create_topics([NewTopic(t, 3, 1, config={"retention.ms": RETENTION}) for t in TOPICS])
    for future in futures.values():
        future.result(30)
    written = produce(one.bootstrap, TOPICS[0], 0, 50)

    leader = quorum.voters[leader_id]
    wait_for(lambda: _snapshots(leader), 60, "a snapshot on the leader")
    if controllers == "grete":  # grete cleans at once; Kafka's cleaner first runs a minute after start
        wait_for(lambda: _log_moved(leader), 30, "the leader's log start past its oldest snapshot")

    if controllers == "grete":  # Kafka's own tool reads grete's snapshot
        offset, epoch = _snapshots(leader)[-1]
        dumped = kafka_dist.run_tool(KAFKA, "kafka-dump-log", "--cluster-metadata-decoder", "--print-data-log",
                                     "--files", str(leader.data / "__cluster_metadata-0" / snapshot_file_name(offset, epoch)))
        assert dumped.returncode == 0 and "Exception" not in dumped.stdout + dumped.stderr, dumped.stderr
        assert f"Snapshot end offset: {offset}, epoch: {epoch}" in dumped.stdout
        assert all(f'"name":"{topic}"' in dumped.stdout for topic in TOPICS)
        assert '"name":"metadata.version"' in dumped.stdout and "REGISTER_BROKER_RECORD" in dumped.stdout
        # kafka-metadata-shell builds Kafka's image from it (a copy: it locks a running node's data dir)
        copy = tmp_path / "shell" / "__cluster_metadata-0" / snapshot_file_name(offset, epoch)
        copy.parent.mkdir(parents=True)
        shutil.copyfile(leader.data / "__cluster_metadata-0" / copy.name, copy)
        # The shell runs its command once anything of the file is applied, which may be before all
        # of it is (its waitUntilCaughtUp only asks for an offset past 0): a partial image is tried again.
        expected = {f"/image/topics/byName/{t}/2" for t in TOPICS} | {"/image/cluster/brokers/10",
                                                                       "/image/features/metadataVersion"}
        image: set[str] = set()
        for _ in range(3):
            image = set(_shell(copy, "find", "/image").split())
            if expected <= image:
                break
        assert expected <= image, sorted(expected - image)
    two = _broker(joiner, quorum, 11, tmp_path / "broker11")
    started.append(two)
    wait_for(lambda: _listed(two) == {10, 11}, 120, "the new broker registered and listing both")
    assert _snapshots(two), "the new broker holds no snapshot: it did not fetch one"
    wait_for(lambda: set(TOPICS) <= _topics(two), 60, "the topics on the new broker")
    assert _retention(two, TOPICS[-1]) == RETENTION

    joined = AdminClient({"bootstrap.servers": two.bootstrap})  # kept alive until the answer
    joined.create_topics([NewTopic("after", 2, 2)])["after"].result(30)
    wait_for(lambda: "after" in _topics(one), 60, "the new topic on the first broker")
    sent = produce(two.bootstrap, "after", 0, 100)
    assert sorted(consume(two.bootstrap, "after", len(sent), group="g-after")) == sorted(sent)
    assert sorted(consume(two.bootstrap, TOPICS[0], len(written), group="g-before")) == sorted(written)

    if controllers == "grete":
        # A controller restarted after its log start moved starts from its own snapshot.
        follower = next(v for v in quorum.voters.values() if v.node_id != quorum.leader_view().leader_id)
        wait_for(lambda: _log_moved(follower), 30, f"voter {follower.node_id}'s log start moved")
        follower.kill()
        follower.start()
        wait_for(lambda: "starting from snapshot" in follower.log.read_text(errors="replace"), 60,
                 f"voter {follower.node_id} restarted from its snapshot")
        wait_for(lambda: "registered controller" in follower.log.read_text(errors="replace").split(
            "starting from snapshot")[-1], 60, f"voter {follower.node_id} back in the quorum")
        quorum.caught_up(60)
        joined.create_topics([NewTopic("later", 1, 2)])["later"].result(30)
        quorum.caught_up(60)
        assert "Traceback" not in follower.log.read_text(errors="replace")


def _lead(quorum: Quorum, voter: Voter) -> None:
    """Make ``voter`` lead: the third voter paused, the leader killed and restarted, so the election
    is between ``voter`` (up to date, standing first) and the restarted one; again if it lost."""
    for _ in range(10):
        leader_id = quorum.leader_view().leader_id
        if leader_id == voter.node_id:
            return
        leader = quorum.voters[leader_id]
        third = next(v for v in quorum.voters.values() if v.node_id not in (leader_id, voter.node_id))
        assert third.process is not None
        third.process.send_signal(signal.SIGSTOP)
        try:
            leader.kill()
            leader.start()
            wait_for(lambda pair=(voter, leader): any(  # DescribeQuorum is answered by the leader alone
                (d := quorum.describe(v)) is not None and d.error_code == 0 for v in pair) or None,
                60, "a leader elected")
        finally:
            third.process.send_signal(signal.SIGCONT)
        quorum.caught_up(60)
    raise AssertionError(f"voter {voter.node_id} never led")


@pytest.mark.parametrize("kinds", [
    ["grete", "grete", "grete"],
    pytest.param(["grete", "grete", "kafka"], marks=pytest.mark.long),  # a Kafka controller loads grete's
    pytest.param(["kafka", "kafka", "grete"], marks=pytest.mark.long),  # a grete controller loads Kafka's
    pytest.param(["kafka", "kafka", "kafka"], marks=pytest.mark.long),  # the reference
], ids="+".join)
def test_a_voter_that_lost_its_log_rejoins_from_a_snapshot_and_leads(started: list[Any], tmp_path: Path,
                                                                     kinds: list[str]) -> None:
    """The last voter loses its metadata log (as a new disk would leave it) while the others go on;
    it restarts, loads the leader's snapshot, and then leads: the brokers it knows from the snapshot
    take a new topic's replicas, its configs and the earlier topics are there."""
    quorum = start_quorum(kinds, tmp_path / "quorum", lambda _kind: dict(SNAPSHOT_OFTEN))
    started.append(quorum)
    quorum.leader_view()
    brokers = [_broker("grete", quorum, 10 + i, tmp_path / f"broker{10 + i}") for i in range(2)]
    started.extend(brokers)
    wait_for(lambda: _listed(brokers[0]) == {10, 11}, 120, "both brokers registered")
    wiped = quorum.voters[3]
    if quorum.leader_view().leader_id == wiped.node_id:
        _lead(quorum, quorum.voters[1])
    wiped.kill()
    for path in (wiped.data / "__cluster_metadata-0").iterdir():
        path.unlink()
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 2, config={"retention.ms": RETENTION})
                                       for t in TOPICS]).values():
        future.result(30)
    leader = quorum.voters[quorum.leader_view().leader_id]
    wait_for(lambda: _snapshots(leader), 60, "a snapshot on the leader")

    wiped.start()
    wait_for(lambda: _snapshots(wiped), 60, f"voter {wiped.node_id} holding a snapshot")
    quorum.caught_up(60)
    _lead(quorum, wiped)
    admin.create_topics([NewTopic("after", 4, 2)])["after"].result(30)
    wait_for(lambda: "after" in _topics(brokers[1]), 60, "the topic created under the new leader")
    assert _retention(brokers[1], TOPICS[-1]) == RETENTION
    sent = produce(brokers[1].bootstrap, "after", 0, 100)
    assert sorted(consume(brokers[0].bootstrap, "after", len(sent))) == sorted(sent)
