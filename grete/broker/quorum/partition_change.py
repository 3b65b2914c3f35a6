"""One partition's change as the active controller decides it: the new ISR, a leader elected, and,
with eligible leader replicas on (KIP-966, ``eligible.leader.replicas.version`` >= 1), the ELR and
the last known leader; a PartitionChangeRecord or None when nothing changes. The rules are those of
Kafka 4.3's PartitionChangeBuilder:

- **ELR.** While the target ISR is at least the topic's effective min ISR (``min.insync.replicas``,
  at most the replication factor), the ELR and LastKnownElr are empty. Below it, replicas leaving
  the ISR join the ELR (the ISR's and the ELR's members not in the new ISR, less replicas that shut
  down uncleanly): the high watermark does not advance while the ISR is below its minimum, so they
  hold everything committed. The ISR may then become empty (without ELR the last member stays).
- **Election.** The current leader stays while it is valid: in the target ISR (or, with that ISR
  empty, in the ELR) and acceptable (registered, unfenced, not shutting down). Else the first valid
  replica in assignment order; one taken from the ELR becomes the ISR alone and leaves the ELR.
  Preferred elections try the first assigned replica first. With ELR on, a partition whose ISR and
  ELR are empty can elect its last known leader (LastKnownElr holding exactly it) once it is
  acceptable, counted as unclean; an unclean election (``unclean.leader.election.enable`` or ElectLeaders UNCLEAN) takes the
  first acceptable replica. Either unclean way the ISR is the leader alone and the ELR is cleared.
- **Reassignment steps** (the replicas to leave, in their order, given): a replica leaving bumps the
  leader epoch even under the same leader; the ELR rules apply to the step's ISR as to any other.
- **Last known leader.** When the ISR becomes empty, LastKnownElr is set to the leader it had (once);
  it is cleared when the partition has, or keeps, a leader.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from grete.coordinator.metadata import PartitionMeta
from grete.protocol.metadata import PartitionChangeRecord

NO_LEADER = -1
NO_CHANGE = -2  # PartitionChangeRecord's Leader: unchanged


class Election(Enum):
    ONLINE = "online"        # keep or replace the leader from the ISR (and the ELR)
    PREFERRED = "preferred"  # the first assigned replica if it can lead
    UNCLEAN = "unclean"      # also any acceptable replica when no clean leader exists


@dataclass
class PartitionChange:
    """The inputs of one change; :meth:`build` gives its record."""

    part: PartitionMeta
    topic_id: uuid.UUID
    index: int
    acceptable: Callable[[int], bool]  # may lead: registered, unfenced, not shutting down
    min_isr: int                       # the topic's effective min ISR
    elr_enabled: bool
    target_isr: list[int] | None = None
    target_replicas: list[int] | None = None  # a reassignment's step: the replicas it leaves (and their order)
    election: Election = Election.ONLINE
    unclean_shutdown: Iterable[int] = ()
    _isr: list[int] = field(init=False, default_factory=list)
    _elr: list[int] = field(init=False, default_factory=list)
    _last_known: list[int] = field(init=False, default_factory=list)

    def build(self) -> PartitionChangeRecord | None:
        part = self.part
        self._isr = list(part.isr if self.target_isr is None else self.target_isr)
        self._elr = list(part.elr)
        self._last_known = list(part.last_known_elr)
        record = PartitionChangeRecord(partition_id=self.index, topic_id=self.topic_id, leader=NO_CHANGE)
        self._populate_elr()
        self._elect(record)
        if record.leader == NO_CHANGE and not set(part.replicas) <= set(self._replicas):
            record.leader = part.leader  # a replica leaves: a new leader epoch, so the leader's fetchers re-learn the set
        self._record_elr(record)
        if record.isr is None and (self._isr or self.elr_enabled) and self._isr != list(part.isr):
            record.isr = list(self._isr)
        self._last_known_leader(record)
        if (record.leader == NO_CHANGE and record.isr is None and record.eligible_leader_replicas is None
                and record.last_known_elr is None):
            return None
        return record

    def _populate_elr(self) -> None:
        if not self.elr_enabled:
            return
        if len(self._isr) >= self.min_isr:
            self._elr, self._last_known = [], []
            return
        isr = set(self._isr)
        unclean = set(self.unclean_shutdown)
        candidates = set(self._elr) | set(self.part.isr)
        self._elr = sorted(r for r in candidates if r not in isr and r not in unclean)
        candidates |= set(self._last_known)
        self._last_known = sorted(r for r in candidates if r not in isr and r not in self._elr)

    def _valid(self, replica: int) -> bool:
        in_sync = replica in self._isr or (not self._isr and replica in self._elr)
        return in_sync and self.acceptable(replica)

    @property
    def _replicas(self) -> list[int]:
        return list(self.part.replicas if self.target_replicas is None else self.target_replicas)

    def _choose(self) -> tuple[int, bool]:
        """(leader, unclean): the elected leader, NO_LEADER when none can be."""
        part = self.part
        replicas = self._replicas
        if self.election is Election.PREFERRED:
            if replicas and self._valid(replicas[0]):
                return replicas[0], False
            order = replicas[1:]
        else:
            order = replicas
        if self._valid(part.leader):
            return part.leader, False
        clean = next((r for r in order if self._valid(r)), None)
        if clean is not None:
            return clean, False
        if self._can_elect_last_known_leader():
            return part.last_known_elr[0], True
        if self.election is Election.UNCLEAN:
            unclean = next((r for r in replicas if self.acceptable(r)), None)
            if unclean is not None:
                return unclean, True
        return NO_LEADER, False

    def _can_elect_last_known_leader(self) -> bool:
        """With ISR and ELR empty, the last known leader may lead again once it is acceptable: it
        is the replica most likely to hold what the partition last committed (Kafka 4.3.1 checks
        that it is acceptable; its 2024 source elected it alive or not)."""
        last_known = self.part.last_known_elr
        return (self.elr_enabled and not self._isr and not self._elr and len(last_known) == 1
                and self.acceptable(last_known[0]))

    def _elect(self, record: PartitionChangeRecord) -> None:
        leader, unclean = self._choose()
        if leader == self.part.leader:
            return
        if leader in self._elr:
            self._isr = [leader]
            self._elr = [r for r in self._elr if r != leader]
        record.leader = leader
        if unclean:
            record.isr = [leader]  # the new leader alone: what only the others held may be lost

    def _record_elr(self, record: PartitionChangeRecord) -> None:
        if record.isr is not None or not self.elr_enabled:  # an unclean election clears them
            self._elr, self._last_known = [], []
        if self._elr != list(self.part.elr):
            record.eligible_leader_replicas = list(self._elr)

    def _last_known_leader(self, record: PartitionChangeRecord) -> None:
        if not self.elr_enabled:
            return
        part = self.part
        if record.isr is not None and not record.isr and part.last_known_elr != [part.leader]:
            record.last_known_elr = [part.leader]  # the first time the partition goes leaderless
        elif ((record.leader >= 0 or (part.leader != NO_LEADER and record.leader != NO_LEADER))
              and part.last_known_elr):
            record.last_known_elr = []  # it has, or keeps, a leader
