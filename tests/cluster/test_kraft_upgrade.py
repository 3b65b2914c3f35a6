"""A static KRaft quorum (``controller.quorum.voters``, kraft.version 0) upgraded to a dynamic one
as Kafka 4.3.1's docs do it: ``kafka-features --bootstrap-controller ... upgrade --feature
kraft.version=1``. The voters tell the leader their directory ids and endpoints (UpdateRaftVoter)
once they follow it; the upgrade is refused until every one has, then writes the voter set, and
``kafka-metadata-quorum remove-controller`` (refused on a static quorum) works. grete's controllers
alone, mixed with Kafka 4.3.1's, and Kafka's alone as the reference."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grete.storage.files import uuid_to_kafka
from grete.storage.meta_properties import read_meta_properties
from tools import kafka_dist
from tools.kraft_quorum import KAFKA, Voter, start_quorum, wait_for

pytestmark = pytest.mark.slow


def _tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = kafka_dist.run_tool(KAFKA, name, *args, check=False)
    return result


def _directory(voter: Voter) -> str:
    meta = read_meta_properties(voter.data)
    assert meta is not None and meta.directory_id is not None
    return uuid_to_kafka(meta.directory_id)


def _levels(bootstrap: str) -> dict[str, str]:
    """FinalizedVersionLevel by feature, as kafka-features describes them."""
    described = _tool("kafka-features", "--bootstrap-controller", bootstrap, "describe").stdout
    return dict(re.findall(r"Feature: (\S+)\s.*?FinalizedVersionLevel: (\S+)", described))


@pytest.mark.parametrize("kinds", [
    ["grete", "grete", "grete"],
    pytest.param(["grete", "kafka", "kafka"], marks=pytest.mark.long),
    pytest.param(["kafka", "grete", "grete"], marks=pytest.mark.long),
    pytest.param(["kafka", "kafka", "kafka"], marks=pytest.mark.long),  # the reference
], ids="-".join)
def test_a_static_quorum_is_upgraded_to_kraft_version_1_and_then_changes_its_voters(kinds: list[str],
                                                                                     tmp_path: Path) -> None:
    quorum = start_quorum(kinds, tmp_path)
    try:
        view = quorum.caught_up(timeout=120)
        bootstrap = f"127.0.0.1:{quorum.voters[view.leader_id].port}"
        before = wait_for(lambda: (found := _levels(bootstrap)).get("kraft.version") == "0" and found, 60,
                          "kraft.version 0 described")
        follower = next(v for v in quorum.voters.values() if v.node_id != view.leader_id)
        static = _tool("kafka-metadata-quorum", "--bootstrap-controller", bootstrap, "remove-controller",
                       "--controller-id", str(follower.node_id), "--controller-directory-id", _directory(follower))
        assert static.returncode != 0 and "UnsupportedVersionException" in static.stdout + static.stderr

        # Right after a leader is elected its voters have not all told it yet (each does a fetch
        # timeout into following it): refused with Kafka's message, then done.
        def upgraded() -> bool:
            done = _tool("kafka-features", "--bootstrap-controller", bootstrap, "upgrade", "--feature", "kraft.version=1")
            if done.returncode == 0:
                assert "kraft.version was upgraded to 1." in done.stdout, done.stdout
                return True
            assert "because not all of the voters support it" in done.stdout + done.stderr, done.stdout + done.stderr
            return False
        wait_for(upgraded, 60, "kraft.version upgraded", every=1.0)
        assert _levels(bootstrap) == {**before, "kraft.version": "1"}  # metadata.version and the others as they were
        # metadata.version: the same level again is nothing to do; a downgrade is refused.
        same = _tool("kafka-features", "--bootstrap-controller", bootstrap, "upgrade", "--metadata", before["metadata.version"])
        assert same.returncode == 0, same.stdout + same.stderr
        down = _tool("kafka-features", "--bootstrap-controller", bootstrap, "downgrade", "--metadata", "3.9-IV0")
        assert down.returncode != 0 and "Refusing to perform the requested downgrade" in down.stdout + down.stderr

        removed = _tool("kafka-metadata-quorum", "--bootstrap-controller", bootstrap, "remove-controller",
                        "--controller-id", str(follower.node_id), "--controller-directory-id", _directory(follower))
        assert removed.returncode == 0, removed.stdout + removed.stderr
        wait_for(lambda: {v.replica_id for v in quorum.leader_view().current_voters} == set(quorum.voters) - {follower.node_id},
                 60, "two voters left")
    finally:
        quorum.stop()
