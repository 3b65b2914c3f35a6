"""A seeded simulation of KRaft's Raft core: voters and an observer over a network that loses,
delays, duplicates and reorders messages, splits into partitions, and crashes nodes (which come back
with only their log and quorum-state). Raft's safety properties are checked at every step, and after
the faults stop a leader must be elected and a new append committed within bounded simulated time.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft import RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import InMemoryRaftLog
from grete.coordinator.kraft.raft_messages import RaftMessage, RaftOutput, VoteResponse

SIM_CONFIG = RaftConfig(election_timeout_ms=50, fetch_timeout_ms=100, election_backoff_max_ms=50,
                        request_timeout_ms=40, retry_backoff_ms=5, fetch_max_wait_ms=20, fetch_max_records=20)
MAX_DELAY_MS = 8


def receiving(source: int, message: RaftMessage, now_ms: int) -> Callable[[RaftNode], RaftOutput]:
    return lambda raft: raft.receive(source, message, now_ms)


def appending(value: bytes, now_ms: int) -> Callable[[RaftNode], RaftOutput]:
    return lambda raft: raft.append([value], now_ms)


class SafetyViolation(AssertionError):
    pass


class CheckedLog(InMemoryRaftLog):
    """A node's log that refuses to lose a committed record (the truncation point of a diverged
    follower is never below what it holds of the committed log)."""

    def __init__(self, cluster: Cluster, node_id: int) -> None:
        super().__init__()
        self.cluster = cluster
        self.node_id = node_id

    def truncate_to(self, offset: int) -> None:
        committed = self.cluster.committed
        for o in range(offset, min(self.end_offset, len(committed))):
            if self.entry(o) == committed[o]:
                raise SafetyViolation(f"node {self.node_id} truncated committed offset {o}")
        super().truncate_to(offset)

    def save(self) -> tuple[list[int], list[bytes], list[bool]]:
        return list(self._epochs), list(self._values), list(self._controls)

    def restore(self, saved: tuple[list[int], list[bytes], list[bool]]) -> None:
        """Back to ``saved``: what a crash leaves of changes not yet flushed."""
        self._epochs, self._values, self._controls = saved


@dataclass
class SimNode:
    node_id: int
    log: CheckedLog
    stored: QuorumState = field(default_factory=QuorumState)
    raft: RaftNode | None = None
    down_until: int = 0
    checked_hw: int = 0


@dataclass(frozen=True)
class Faults:
    loss: float = 0.05
    duplicate: float = 0.02
    crash: float = 0.002  # per step
    crash_before_persist: float = 0.002  # per input: the node dies before its output leaves
    crash_after_vote: float = 0.2  # the node dies right after granting a vote
    resign: float = 0.001  # per step: a leader steps down gracefully
    partition: float = 0.003
    heal: float = 0.01
    append: float = 0.1


class Cluster:
    def __init__(self, seed: int, voters: int, observers: int = 1, faults: Faults = Faults(),
                 on_deadline: bool = False) -> None:
        self.rng = random.Random(seed)
        self.faults = faults
        # Tick a node only once its next_deadline has come, as the network driver does (it sleeps
        # until then): a timer the deadline forgets then shows as a lost election or commit.
        self.on_deadline = on_deadline
        self.voter_ids = frozenset(range(voters))
        ids = list(range(voters + observers))
        self.nodes = {i: SimNode(i, CheckedLog(self, i)) for i in ids}
        self.now = 0
        self.seq = 0
        self.queue: list[tuple[int, int, int, int, RaftMessage]] = []
        self.groups: list[frozenset[int]] | None = None
        self.leaders: dict[int, int] = {}  # epoch -> the one leader it had
        self.complete_leaders: set[int] = set()  # epochs whose leader was checked for completeness
        self.committed: list[tuple[int, bytes]] = []  # (epoch, value) at each committed offset
        self.commit_epoch: list[int] = []  # the epoch in which each offset was first seen committed
        self.values = 0
        for node in self.nodes.values():
            self.start(node)

    # --- nodes ------------------------------------------------------------------------------------
    def start(self, node: SimNode) -> None:
        node.raft = RaftNode(node.node_id, self.voter_ids, node.log, node.stored, self.now,
                             random.Random(self.rng.random()), SIM_CONFIG)
        node.checked_hw = 0

    def crash(self, node: SimNode, down_ms: int) -> None:
        node.raft = None
        node.down_until = self.now + down_ms

    def feed(self, node: SimNode, step: Callable[[RaftNode], RaftOutput]) -> None:
        """One input to a live node; it may crash before the output is durable (its log changes
        and quorum-state lost, its messages never sent)."""
        assert node.raft is not None
        if self.rng.random() < self.faults.crash_before_persist:
            saved = node.log.save()
            step(node.raft)
            node.log.restore(saved)
            self.crash(node, self.rng.randint(1, 200))
            return
        self.apply(node, step(node.raft))

    def apply(self, node: SimNode, out: RaftOutput) -> None:
        if out.quorum_state is not None:
            node.stored = out.quorum_state
        for destination, message in out.messages:
            self.send(node.node_id, destination, message)
        self.check_node(node)
        if any(isinstance(m, VoteResponse) and m.vote_granted for _, m in out.messages) and (
                self.rng.random() < self.faults.crash_after_vote):
            self.crash(node, self.rng.randint(1, 50))

    # --- network ----------------------------------------------------------------------------------
    def send(self, source: int, destination: int, message: RaftMessage) -> None:
        copies = 0 if self.rng.random() < self.faults.loss else 1
        copies += self.rng.random() < self.faults.duplicate
        for _ in range(copies):
            self.seq += 1
            heapq.heappush(self.queue, (self.now + self.rng.randint(1, MAX_DELAY_MS), self.seq,
                                        source, destination, message))

    def connected(self, a: int, b: int) -> bool:
        return self.groups is None or any(a in group and b in group for group in self.groups)

    def deliver(self) -> None:
        while self.queue and self.queue[0][0] <= self.now:
            _, _, source, destination, message = heapq.heappop(self.queue)
            node = self.nodes[destination]
            if node.raft is not None and self.connected(source, destination):
                self.feed(node, receiving(source, message, self.now))

    # --- the run ----------------------------------------------------------------------------------
    def step(self, faults: bool = True) -> None:
        self.now += self.rng.randint(1, 3)
        if faults:
            self.inject_faults()
        for node in self.nodes.values():
            if node.raft is None and node.down_until <= self.now:
                self.start(node)
        if self.rng.random() < self.faults.append:
            self.client_append()
        self.deliver()
        for node in self.nodes.values():
            if node.raft is not None and (not self.on_deadline or self.now >= node.raft.next_deadline(self.now)):
                self.feed(node, lambda raft: raft.tick(self.now))
                if self.on_deadline:
                    self.tick_while_due(node)
        self.check_leaders()

    def tick_while_due(self, node: SimNode) -> None:
        """As the driver does: tick again while the node is due now. A step may leave one thing
        due at once (a backoff of 0 ms), never an endless run: that would be an idle quorum
        burning a core."""
        for _ in range(3):
            if node.raft is None or node.raft.next_deadline(self.now) > self.now:
                return
            self.feed(node, lambda raft: raft.tick(self.now))
        if node.raft is not None and node.raft.next_deadline(self.now) <= self.now:
            raise AssertionError(f"node {node.node_id} is due again and again at {self.now} "
                                 f"({node.raft.role}, epoch {node.raft.epoch})")

    def inject_faults(self) -> None:
        rng = self.rng
        if rng.random() < self.faults.crash:
            self.crash(self.nodes[rng.choice(sorted(self.nodes))], rng.randint(1, 300))
        leader = self.leader()
        if leader is not None and leader.raft is not None and rng.random() < self.faults.resign:
            self.feed(leader, lambda raft: raft.resign(self.now))
        if self.groups is None and rng.random() < self.faults.partition:
            ids = sorted(self.nodes)
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            self.groups = [frozenset(ids[:cut]), frozenset(ids[cut:])]
        elif self.groups is not None and rng.random() < self.faults.heal:
            self.groups = None

    def client_append(self) -> list[tuple[SimNode, int]]:
        """Append a new value on every node that believes it leads; (node, offset) of each."""
        appended = []
        for node in self.nodes.values():
            if node.raft is not None and node.raft.role == "Leader":
                self.values += 1
                offset = node.log.end_offset
                value = b"v%d" % self.values
                self.feed(node, appending(value, self.now))
                appended.append((node, offset))
        return appended

    def heal(self) -> None:
        self.groups = None
        self.faults = Faults(loss=0, duplicate=0, crash=0, crash_before_persist=0, crash_after_vote=0,
                             resign=0, partition=0, heal=0, append=0)
        for node in self.nodes.values():
            if node.raft is None:
                node.down_until = self.now

    # --- properties -------------------------------------------------------------------------------
    def check_node(self, node: SimNode) -> None:
        """What a node reports committed is the committed log, the same on every node."""
        assert node.raft is not None
        high_watermark = node.raft.high_watermark
        for offset in range(node.checked_hw, high_watermark):
            entry = node.log.entry(offset)
            if offset < len(self.committed):
                if self.committed[offset] != entry:
                    raise SafetyViolation(f"node {node.node_id} committed {entry} at {offset}, "
                                          f"not {self.committed[offset]}")
            else:
                self.committed.append(entry)
                self.commit_epoch.append(node.raft.epoch)
        node.checked_hw = max(node.checked_hw, high_watermark)

    def check_leaders(self) -> None:
        """At most one leader per epoch; a new leader holds every record committed up to its epoch
        (it never truncates while it leads: check_logs looks again)."""
        for node in self.nodes.values():
            if node.raft is None or node.raft.role != "Leader":
                continue
            epoch = node.raft.epoch
            known = self.leaders.setdefault(epoch, node.node_id)
            if known != node.node_id:
                raise SafetyViolation(f"epoch {epoch} has two leaders: {known} and {node.node_id}")
            if epoch not in self.complete_leaders:
                self.check_leader_complete(node)
                self.complete_leaders.add(epoch)

    def check_leader_complete(self, node: SimNode) -> None:
        assert node.raft is not None
        epoch = node.raft.epoch
        for offset, entry in enumerate(self.committed):
            if self.commit_epoch[offset] <= epoch and (
                    offset >= node.log.end_offset or node.log.entry(offset) != entry):
                raise SafetyViolation(f"leader {node.node_id} of epoch {epoch} lacks committed offset {offset}")

    def check_logs(self) -> None:
        """Log matching on the committed offsets: a record of the committed epoch at a committed
        offset is the committed record, and a majority of voters hold the whole committed log."""
        holders = 0
        for node in self.nodes.values():
            if node.raft is not None and node.raft.role == "Leader":
                self.check_leader_complete(node)
            whole = True
            for offset, entry in enumerate(self.committed):
                if offset >= node.log.end_offset:
                    whole = False
                    break
                mine = node.log.entry(offset)
                if mine[0] == entry[0] and mine != entry:
                    raise SafetyViolation(f"node {node.node_id} has {mine} at committed offset {offset}")
                whole = whole and mine == entry
            holders += whole and node.node_id in self.voter_ids
        if holders < len(self.voter_ids) // 2 + 1:
            raise SafetyViolation(f"only {holders} voters hold the whole committed log")

    def leader(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.raft is not None and n.raft.role == "Leader"]
        return max(leaders, key=lambda n: n.raft.epoch if n.raft else -1, default=None)

    def recover(self, limit_ms: int) -> int:
        """After healing: the simulated time until a leader commits a new record on every node."""
        start = self.now
        offset: int | None = None
        while self.now - start < limit_ms:
            self.step(faults=False)
            leader = self.leader()
            if offset is None and leader is not None and leader.raft is not None and (
                    leader.raft.high_watermark >= leader.log.end_offset):
                appended = self.client_append()
                offset = appended[0][1] if appended else None
            if offset is not None and all(n.raft is not None and n.raft.high_watermark > offset
                                          for n in self.nodes.values()):
                return self.now - start
        raise AssertionError(f"no leader committed a new record within {limit_ms} ms after healing")


def run(seed: int, voters: int, steps: int, on_deadline: bool = False) -> Cluster:
    cluster = Cluster(seed, voters, on_deadline=on_deadline)
    for step in range(steps):
        cluster.step()
        if step % 100 == 0:
            cluster.check_logs()
    cluster.check_logs()
    cluster.heal()
    # A few election timeouts: the faults are gone, crashed nodes are back.
    cluster.recover(limit_ms=20 * SIM_CONFIG.election_timeout_ms)
    cluster.check_logs()
    return cluster


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_safety_and_recovery_under_faults(seed: int, voters: int) -> None:
    cluster = run(seed, voters, steps=8000)
    # The run did what it is meant to: elections in many epochs, a committed log of some length.
    assert len(cluster.leaders) >= 10
    assert len(cluster.committed) >= 300


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ticking_only_at_the_next_deadline_keeps_safety_and_liveness(seed: int) -> None:
    """The driver wakes a node only for a message, an append or its next_deadline: with ticks
    skipped until then, elections and commits happen as often as with a tick every step."""
    cluster = run(seed, 3, steps=8000, on_deadline=True)
    assert len(cluster.leaders) >= 10
    assert len(cluster.committed) >= 300


def test_checks_catch_a_second_leader_in_an_epoch() -> None:
    cluster = Cluster(7, 3)
    while cluster.leader() is None:
        cluster.step(faults=False)
    leader = cluster.leader()
    assert leader is not None and leader.raft is not None
    cluster.leaders[leader.raft.epoch] = leader.node_id + 1
    with pytest.raises(SafetyViolation, match="two leaders"):
        cluster.check_leaders()


def test_checks_catch_a_changed_committed_record() -> None:
    cluster = Cluster(7, 3)
    while len(cluster.committed) < 3:
        cluster.step(faults=False)
    cluster.committed[1] = (cluster.committed[1][0], b"other")
    with pytest.raises(SafetyViolation):
        cluster.check_logs()
