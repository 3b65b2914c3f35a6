"""Dynamic KRaft quorums (KIP-853), started as Kafka 4's docs start them: every controller formatted
with ``kafka-storage format --initial-controllers`` and configured with
``controller.quorum.bootstrap.servers`` (no ``controller.quorum.voters``), brokers finding the leader
through the bootstrap servers; then a controller added with ``kafka-metadata-quorum add-controller``
and one removed with ``remove-controller`` (the leader itself, which resigns once its removal is
committed). grete's controllers alone, mixed with Kafka 4.3.1's either way round, and Kafka's alone as
the reference.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.storage.files import uuid_to_kafka
from grete.storage.meta_properties import read_meta_properties
from grete.testing.common import free_port
from tools import kafka_dist
from tools.kraft_quorum import (
    KAFKA,
    BrokerOfQuorum,
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

TOPIC = "dynamic"
BROKER_ID = 100
SINGLE_BROKER = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1"}


@pytest.fixture
def quorum(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quorum]:
    kinds, _added, _broker = request.param
    started = start_quorum(kinds, tmp_path, dynamic=True)
    try:
        yield started
    finally:
        started.stop()


def _metadata_quorum(*args: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = kafka_dist.run_tool(KAFKA, "kafka-metadata-quorum", *args, check=False)
    return result


def _directory(voter: Voter) -> str:
    meta = read_meta_properties(voter.data)
    assert meta is not None and meta.directory_id is not None
    return uuid_to_kafka(meta.directory_id)


def _topic_created(broker: BrokerOfQuorum) -> bool:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures fail once it is gone
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    except Exception as exc:  # noqa: BLE001 - retried until the broker is registered and unfenced
        return "TOPIC_ALREADY_EXISTS" in str(exc)
    return True


def _observer_caught_up(quorum: Quorum, node_id: int) -> bool:
    view = quorum.leader_view()
    return any(o.replica_id == node_id and o.log_end_offset >= view.high_watermark for o in view.observers)


def _added_controller(quorum: Quorum, kind: str, workdir: Path) -> Voter:
    """A controller formatted with --no-initial-controllers, started; it fetches as an observer."""
    voter = Voter(max(quorum.voters) + 1, kind, free_port(), workdir)
    voter.workdir.mkdir(parents=True)
    config = voter.workdir / "controller.properties"
    config.write_text(voter.properties(quorum.config))
    kafka_dist.run_tool(KAFKA, "kafka-storage", "format", "-t", quorum.cluster_id, "-c", str(config),
                        "--no-initial-controllers", check=True)
    voter.start()
    quorum.voters[voter.node_id] = voter
    return voter


@pytest.mark.parametrize("quorum", [
    pytest.param((["grete", "grete", "grete"], "grete", "grete"), id="grete"),
    pytest.param((["kafka", "kafka", "grete"], "grete", "kafka"), id="kafka+kafka+grete", marks=pytest.mark.long),
    pytest.param((["grete", "grete", "kafka"], "kafka", "grete"), id="grete+grete+kafka", marks=pytest.mark.long),
    pytest.param((["kafka", "kafka", "kafka"], "kafka", "kafka"), id="kafka", marks=pytest.mark.long),  # the reference
], indirect=True)
def test_a_dynamic_quorum_serves_a_cluster_and_changes_its_voters(quorum: Quorum, tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    _kinds, added_kind, broker_kind = request.node.callspec.params["quorum"]
    view = quorum.caught_up(90)
    # Every voter listed with the directory id it was formatted with (the voter set is in the log).
    assert {r.replica_id: uuid_to_kafka(r.replica_directory_id) for r in view.current_voters} == \
        {v.node_id: _directory(v) for v in quorum.voters.values()}
    start = start_grete_broker if broker_kind == "grete" else start_kafka_broker
    broker = start(quorum, BROKER_ID, tmp_path / "broker", SINGLE_BROKER)
    try:
        wait_for(lambda: _topic_created(broker), 120, "the topic, through a broker that found the leader")
        written = produce(broker.bootstrap, TOPIC, 0, 50)

        # The leader SIGKILLed: another voter leads, writes go on, the old leader comes back as a voter.
        leader = quorum.voters[quorum.leader_view().leader_id]
        leader.kill()
        assert quorum.leader_view(60).leader_id != leader.node_id
        written += produce(broker.bootstrap, TOPIC, 50, 50)
        leader.start()
        view = quorum.caught_up(90, expected=set(quorum.voters))

        # A controller added, once it has caught up as an observer. A grete broker is asked, which
        # forwards it to the active controller (--bootstrap-server); through a Kafka 4.3.1 broker the
        # forwarded AddRaftVoter is answered NOT_LEADER_OR_FOLLOWER here for as long as we waited
        # (measured), so a Kafka broker's cluster is asked through the controllers.
        added = _added_controller(quorum, added_kind, tmp_path / "added")
        wait_for(lambda: _observer_caught_up(quorum, added.node_id), 90, "the new controller caught up")
        leading = quorum.voters[quorum.leader_view().leader_id]
        bootstrap = f"127.0.0.1:{leading.port}"
        through = ("--bootstrap-server", broker.bootstrap) if broker_kind == "grete" else ("--bootstrap-controller",
                                                                                          bootstrap)
        result = _metadata_quorum(*through, "--command-config", str(added.workdir / "controller.properties"),
                                  "add-controller")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"Added controller {added.node_id}" in result.stdout
        view = quorum.caught_up(90, expected=set(quorum.voters))
        assert {r.replica_id for r in view.current_voters} == set(quorum.voters)
        assert added.node_id not in {o.replica_id for o in view.observers}

        # The leader removes itself: it resigns once the removal is committed, another leads.
        result = _metadata_quorum("--bootstrap-controller", bootstrap, "remove-controller", "--controller-id",
                                  str(leading.node_id), "--controller-directory-id", _directory(leading))
        assert result.returncode == 0, result.stdout + result.stderr
        remaining = set(quorum.voters) - {leading.node_id}

        def without_it() -> object:
            found = quorum.leader_view()
            voters = {r.replica_id for r in found.current_voters}
            return found if voters == remaining and found.leader_id != leading.node_id else None
        view = wait_for(without_it, 60, "a quorum without the removed leader")
        written += produce(broker.bootstrap, TOPIC, 100, 50)
        described = _metadata_quorum("--bootstrap-controller", f"127.0.0.1:{quorum.voters[view.leader_id].port}",
                                     "describe", "--status")
        assert described.returncode == 0, described.stderr
        assert f'"id": {added.node_id}, "directoryId": "{_directory(added)}"' in described.stdout
        assert sorted(consume(broker.bootstrap, TOPIC, len(written))) == sorted(written)
    finally:
        broker.kill()


@pytest.mark.long
def test_a_kafka_voter_updates_its_endpoints_with_a_grete_leader(tmp_path: Path) -> None:
    """UpdateRaftVoter: the Kafka 4.3.1 voter's entry was formatted with ``localhost``, its listener is
    127.0.0.1; as a follower it sends the leader its own endpoints, and the grete leader writes them."""
    quorum = start_quorum(["grete", "grete", "kafka"], tmp_path, dynamic=True, start=False)
    initial = ",".join(f"{v.node_id}@{'localhost' if v.kind == 'kafka' else '127.0.0.1'}:{v.port}:"
                       f"{quorum.directories[v.node_id]}" for v in quorum.voters.values())
    try:
        for voter in quorum.voters.values():  # formatted again, with that list
            for path in sorted(voter.data.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            kafka_dist.run_tool(KAFKA, "kafka-storage", "format", "-t", quorum.cluster_id, "-c",
                                str(voter.workdir / "controller.properties"), "--initial-controllers", initial,
                                check=True)
        quorum.voters[1].start()
        quorum.voters[2].start()
        quorum.leader_view(60)  # a grete leader, elected by the two grete voters, before Kafka's starts
        quorum.voters[3].start()

        def kafka_voter_endpoint() -> str | None:
            view = quorum.leader_view()
            if quorum.voters[view.leader_id].kind != "grete":
                return None
            described = _metadata_quorum("--bootstrap-controller", f"127.0.0.1:{quorum.voters[view.leader_id].port}",
                                         "describe", "--status")
            line = next((row for row in described.stdout.splitlines() if row.startswith("CurrentVoters")), "")
            return line if f'"endpoints": ["CONTROLLER://127.0.0.1:{quorum.voters[3].port}"]' in line else None
        wait_for(kafka_voter_endpoint, 90, "the Kafka voter's endpoint updated under a grete leader")
    finally:
        quorum.stop()
