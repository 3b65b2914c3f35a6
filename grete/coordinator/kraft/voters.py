"""The quorum's voters as Kafka 4 keeps them (KIP-853): a voter set in the log.

A static quorum (``controller.quorum.voters``, kraft.version 0) has one voter set for ever, voters
known by id alone. A dynamic quorum (kraft.version 1) keeps its voter set in the metadata log: the
format step writes the first one into the bootstrap snapshot (``--standalone``,
``--initial-controllers``), a leader copies it into the log at the start of its first epoch, and each
AddRaftVoter, RemoveRaftVoter or UpdateRaftVoter appends a new VotersRecord. A replica uses the latest
voter set in its log, committed or not (Kafka's rule: a change takes effect when appended), and goes
back to the previous one when the log is truncated below it. Voters are keyed by id and directory id:
a node formatted again (a new directory id) is not the voter it replaces.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.metadata import KRaftVersionRecord, VotersRecord
from grete.protocol.records.control import ControlType

# The offset of a voter set that comes from the bootstrap snapshot or the static configuration,
# before any record of the log (Kafka's -1).
BEFORE_LOG = -1
# The kraft.version range this implementation runs: 1 is the dynamic quorum.
KRAFT_VERSION_RANGE = (0, 1)


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VoterNode:
    """A voter: its id, its metadata log directory's id (ZERO_UUID when the voter set does not
    know it: a static quorum), where it listens, and the kraft.version range it supports."""

    node_id: int
    directory_id: uuid.UUID = ZERO_UUID
    endpoints: tuple[Endpoint, ...] = ()
    kraft_versions: tuple[int, int] = (0, 0)

    def is_key(self, node_id: int, directory_id: uuid.UUID) -> bool:
        """Kafka's VoterNode.isVoter: the id matches and, when this voter's directory is known, the
        directory too (a replica that sends none is not this voter then)."""
        return node_id == self.node_id and (self.directory_id == ZERO_UUID or directory_id == self.directory_id)

    def address(self, listener: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True, slots=True)
class VoterSet:
    nodes: Mapping[int, VoterNode]

    @classmethod
    def of_ids(cls, ids: Iterable[int]) -> VoterSet:
        return cls({i: VoterNode(i) for i in ids})

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.nodes)

    def is_voter(self, node_id: int, directory_id: uuid.UUID = ZERO_UUID) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.is_key(node_id, directory_id)

    def directory_of(self, node_id: int) -> uuid.UUID:
        node = self.nodes.get(node_id)
        return node.directory_id if node is not None else ZERO_UUID

    def needs_update(self, local: VoterNode) -> bool:
        """Kafka's voterNodeNeedsUpdate: ``local`` is a voter here whose endpoints or kraft.version
        range the set does not have."""
        node = self.nodes.get(local.node_id)
        return node is not None and node.is_key(local.node_id, local.directory_id) and node != local

    def with_node(self, node: VoterNode) -> VoterSet:
        return VoterSet({**self.nodes, node.node_id: node})

    def without(self, node_id: int) -> VoterSet:
        return VoterSet({i: n for i, n in self.nodes.items() if i != node_id})

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        return cls({v.voter_id: VoterNode(v.voter_id, v.voter_directory_id,
                                          tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints),
                                          (v.k_raft_version_feature.min_supported_version,
                                           v.k_raft_version_feature.max_supported_version))
                    for v in record.voters})

    def to_record(self) -> VotersRecord:
        return VotersRecord(version=0, voters=[
            VotersRecord.Voter(voter_id=n.node_id, voter_directory_id=n.directory_id,
                               endpoints=[VotersRecord.Endpoint(name=e.listener, host=e.host, port=e.port)
                                          for e in n.endpoints],
                               k_raft_version_feature=VotersRecord.KRaftVersionFeature(
                                   min_supported_version=n.kraft_versions[0],
                                   max_supported_version=n.kraft_versions[1]))
            for n in sorted(self.nodes.values(), key=lambda n: n.node_id)])


class VoterHistory:
    """The voter sets and kraft.version of the log, by the offset each was written at (Kafka's
    KRaftControlRecordStateMachine): the latest one applies; a truncation of the log forgets those
    at or past the new end."""

    def __init__(self, base: VoterSet, kraft_version: int = 0) -> None:
        self._sets: list[tuple[int, VoterSet]] = [(BEFORE_LOG, base)]
        self._versions: list[tuple[int, int]] = [(BEFORE_LOG, kraft_version)]

    @property
    def latest(self) -> VoterSet:
        return self._sets[-1][1]

    @property
    def latest_offset(self) -> int:
        return self._sets[-1][0]

    @property
    def kraft_version(self) -> int:
        return self._versions[-1][1]

    @property
    def dynamic(self) -> bool:
        return self.kraft_version >= 1

    def control_record(self, offset: int, control_type: int, message: Message) -> None:
        """A control record of the log at ``offset`` (past every one seen before)."""
        if control_type == ControlType.KRAFT_VOTERS and isinstance(message, VotersRecord):
            self._sets.append((offset, VoterSet.from_record(message)))
        elif control_type == ControlType.KRAFT_VERSION and isinstance(message, KRaftVersionRecord):
            self._versions.append((offset, message.k_raft_version))

    def at(self, end_offset: int) -> tuple[VoterSet, int]:
        """(voter set, kraft.version) of the log before ``end_offset`` (what a snapshot there holds)."""
        sets = [voters for offset, voters in self._sets if offset < end_offset]
        versions = [version for offset, version in self._versions if offset < end_offset]
        return (sets or [self._sets[0][1]])[-1], (versions or [self._versions[0][1]])[-1]

    def truncate(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: what was written at or past it is gone (the base stays)."""
        for entries in (self._sets, self._versions):
            keep = max(1, bisect_left([offset for offset, _ in entries], end_offset))
            del entries[keep:]


def local_node(node_id: int, directory_id: uuid.UUID, endpoints: Iterable[Endpoint]) -> VoterNode:
    """This replica as a voter set would list it."""
    return VoterNode(node_id, directory_id, tuple(endpoints), KRAFT_VERSION_RANGE)


def updated(voters: VoterSet, local: VoterNode) -> VoterSet:
    """The set with ``local``'s endpoints and kraft.version range (its key unchanged)."""
    node = voters.nodes[local.node_id]
    return voters.with_node(replace(node, endpoints=local.endpoints, kraft_versions=local.kraft_versions))
