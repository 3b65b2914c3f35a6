"""A KRaft controller quorum of several voters, over the network: grete controllers alone, and grete
controllers in one quorum with Apache Kafka 4.3.1's (static voters, ``controller.quorum.voters``).

What is checked is what Kafka's own tools and peers see: the quorum's leader, epoch and high
watermark through DescribeQuorum, every voter caught up, a SIGKILLed leader replaced, a restarted
voter catching up, and in a mixed quorum the metadata log's batches equal, byte for byte, on every
voter whichever implementation led when they were written.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from grete.protocol.records.batch import iter_batches
from grete.protocol.topics import METADATA_TOPIC
from grete.storage.files import uuid_to_kafka
from grete.testing.cluster import free_port
from grete.testing.process import spawn
from tools import kafka_dist

pytestmark = pytest.mark.slow

KAFKA = "4.3.1"
# In a mixed quorum the implementation with one voter should win the election after a leader of the
# other is killed. The survivor of the other kind notices first (shorter fetch timeout), but its
# pre-vote is refused by this one, which still counts the dead leader as alive (KIP-996); when this
# one's own fetch timeout ends, its pre-vote and vote are granted at once. Both directions then come
# in two rounds; the rounds go on if chance decides otherwise.
TIMEOUTS_MS = {"once": {"controller.quorum.fetch.timeout.ms": "3000", "controller.quorum.election.timeout.ms": "300"},
               "twice": {"controller.quorum.fetch.timeout.ms": "1000",
                         "controller.quorum.election.timeout.ms": "1500"}}


@dataclass
class Voter:
    node_id: int
    kind: str  # "grete" or "kafka"
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    def properties(self, voters: str) -> str:
        props = {"process.roles": "controller", "node.id": str(self.node_id),
                 "listeners": f"CONTROLLER://127.0.0.1:{self.port}", "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", "controller.quorum.voters": voters,
                 "log.dirs": str(self.data), **self.extra}
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self) -> None:
        config = self.workdir / "controller.properties"
        if self.kind == "grete":
            self.process = spawn([sys.executable, "-m", "grete.cli", "serve", str(config)], self.log)
        else:
            self.process = spawn(kafka_dist.java_cmd(KAFKA, "kafka-server-start", str(config), log_level="INFO",
                                                     quick_start=False), self.log)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.process = None


@dataclass
class Quorum:
    voters: dict[int, Voter]

    def describe(self, via: Voter) -> DescribeQuorumResponse.PartitionData | None:
        """The quorum as ``via`` answers DescribeQuorum (None when it cannot be asked)."""
        async def ask() -> DescribeQuorumResponse:
            peer = PeerConnection("127.0.0.1", via.port, "test", timeout_s=5)
            try:
                request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                    topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
                response: DescribeQuorumResponse = await peer.call(request, 2)
                return response
            finally:
                peer.close()
        try:
            response = asyncio.run(ask())
        except PeerError:
            return None
        if not response.topics or not response.topics[0].partitions:
            return None
        return response.topics[0].partitions[0]

    def leader_view(self, timeout: float = 60) -> DescribeQuorumResponse.PartitionData:
        """DescribeQuorum answered by the leader (the others answer NOT_LEADER_OR_FOLLOWER)."""
        view: DescribeQuorumResponse.PartitionData = wait_for(
            lambda: next((d for v in self.live() if (d := self.describe(v)) is not None
                          and d.error_code == 0 and d.leader_id == v.node_id), None),
            timeout, "a leader answering DescribeQuorum")
        return view

    def caught_up(self, timeout: float = 60, expected: set[int] | None = None) -> DescribeQuorumResponse.PartitionData:
        """The leader's view once every live voter (or ``expected``) has fetched up to its high watermark."""
        ids = expected if expected is not None else {v.node_id for v in self.live()}

        def ready() -> DescribeQuorumResponse.PartitionData | None:
            view = self.leader_view()
            ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
            return view if view.high_watermark > 0 and all(ends.get(i) == view.high_watermark for i in ids) else None
        view: DescribeQuorumResponse.PartitionData = wait_for(ready, timeout, f"voters {sorted(ids)} caught up")
        return view

    def live(self) -> list[Voter]:
        return [v for v in self.voters.values() if v.process is not None]

    def stop(self) -> None:
        for voter in self.voters.values():
            if voter.process is not None:
                voter.process.kill()
                voter.process.wait(30)


def wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None and found is not False:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def start_quorum(tmp_path: Path) -> Iterator[Callable[[list[str]], Quorum]]:
    quorums: list[Quorum] = []

    def start(kinds: list[str]) -> Quorum:
        if "kafka" in kinds:
            kafka_dist.fetch(KAFKA)
        voters = {i + 1: Voter(i + 1, kind, free_port(), tmp_path / f"voter{i + 1}",
                               extra=TIMEOUTS_MS["once" if kinds.count(kind) == 1 else "twice"])
                  for i, kind in enumerate(kinds)}
        line = ",".join(f"{v.node_id}@127.0.0.1:{v.port}" for v in voters.values())
        cluster_id = uuid_to_kafka(uuid.uuid4())
        for voter in voters.values():
            voter.workdir.mkdir(parents=True)
            config = voter.workdir / "controller.properties"
            config.write_text(voter.properties(line))
            # Kafka's own format step for every voter: grete reads what kafka-storage writes.
            kafka_dist.run_tool(KAFKA, "kafka-storage", "format", "-t", cluster_id, "-c", str(config), check=True)
        quorum = Quorum(voters)
        quorums.append(quorum)
        for voter in voters.values():
            voter.start()
        return quorum
    yield start
    for quorum in quorums:
        quorum.stop()


def metadata_batches(voter: Voter, below: int) -> list[bytes]:
    """The voter's metadata log batches below ``below``, as bytes on disk."""
    partition = voter.data / f"{METADATA_TOPIC}-0"
    found: list[bytes] = []
    for segment in sorted(partition.glob("*.log")):
        found += [bytes(b.bytes_view()) for b in iter_batches(segment.read_bytes()) if b.base_offset < below]
    return found


def test_three_grete_controllers_elect_replicate_and_fail_over(start_quorum: Callable[[list[str]], Quorum]) -> None:
    quorum = start_quorum(["grete", "grete", "grete"])
    view = quorum.caught_up()
    # The first leader wrote the format step's bootstrap records (a metadata transaction) after its
    # LeaderChangeMessage: more than the one control record is committed.
    assert view.high_watermark > 1
    first_leader, first_epoch = view.leader_id, view.leader_epoch
    quorum.voters[first_leader].kill()
    started = time.monotonic()
    after = quorum.leader_view(timeout=30)
    failover = time.monotonic() - started
    assert after.leader_id != first_leader and after.leader_epoch > first_epoch
    quorum.voters[first_leader].start()
    view = quorum.caught_up()
    logs = {v.node_id: metadata_batches(v, view.high_watermark) for v in quorum.voters.values()}
    assert logs[1] == logs[2] == logs[3], "the voters' metadata logs differ below the high watermark"
    print(f"leader {first_leader} killed: leader {after.leader_id} in epoch {after.leader_epoch} after {failover:.2f} s")


@pytest.mark.parametrize("kinds", [["kafka", "kafka", "grete"], ["kafka", "grete", "grete"]],
                         ids=["two-kafka-one-grete", "one-kafka-two-grete"])
def test_a_quorum_mixing_grete_and_kafka_controllers(start_quorum: Callable[[list[str]], Quorum],
                                                     kinds: list[str]) -> None:
    """Elections and replication across implementations: whoever leads, the others follow it to its
    high watermark; leaders are killed until each implementation has led with the other following."""
    quorum = start_quorum(kinds)
    led_by: set[str] = set()
    for _round in range(6):
        view = quorum.caught_up(timeout=120)
        leader = quorum.voters[view.leader_id]
        led_by.add(leader.kind)
        print(f"epoch {view.leader_epoch}: {leader.kind} voter {leader.node_id} leads, high watermark "
              f"{view.high_watermark}, every voter caught up")
        logs = [metadata_batches(v, view.high_watermark) for v in quorum.voters.values()]
        assert all(log == logs[0] for log in logs), f"metadata logs differ below {view.high_watermark}"
        if led_by == {"grete", "kafka"}:
            break
        # Make the other implementation lead: kill this leader; bring it back once another leads.
        leader.kill()
        quorum.leader_view(timeout=60)
        leader.start()
    assert led_by == {"grete", "kafka"}, f"only {led_by} led in six rounds"
    for voter in quorum.live():
        assert voter.process is not None and voter.process.poll() is None, voter.log.read_text()[-3000:]
