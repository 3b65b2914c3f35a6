"""The Raft core's inputs and outputs: KRaft's RPCs for the one partition ``__cluster_metadata-0``.

Each message is the partition-level content of Kafka's RPC of the same name (field names as in
Kafka's JSON specs), flattened: the core speaks for one partition, so topics and partitions arrays,
cluster ids and endpoints belong to the codec layer that wires the core to the network.
``correlation_id`` stands for the request header's: the core numbers its requests, and the wiring
copies the id of the request a response answers into the response it hands back, so late answers to
abandoned requests are told apart (Kafka's RequestManager does the same).

``VoteRequest.pre_vote`` is Vote v2's PreVote (KIP-996); raft_wire writes a pre-vote's epoch as
Kafka does (the prospective's own, one below ``candidate_epoch``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft_log import OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.voters import VoterNode
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode

HW_NOT_SENT = 2**63 - 1  # Fetch v18's HighWatermark default: the feature not supported


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    correlation_id: int
    candidate_epoch: int  # the epoch a candidate is in; for a pre-vote, the epoch it would bump to
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False
    candidate_directory_id: uuid.UUID = ZERO_UUID  # Vote v1+: with the id, the candidate's voter key


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]  # voters, most caught-up first


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    correlation_id: int
    replica_id: int  # ReplicaState.ReplicaId
    replica_directory_id: uuid.UUID = ZERO_UUID  # Fetch v17+: a voter's key is its id and directory
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    # KIP-1166 (Fetch v18): the high watermark the fetcher knows, so a leader whose own is past it
    # answers at once instead of parking the fetch; HW_NOT_SENT from a fetcher that does not say.
    high_watermark: int = HW_NOT_SENT


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int  # CurrentLeader
    leader_epoch: int
    high_watermark: int
    batches: tuple[RaftBatch, ...] = ()
    diverging_epoch: OffsetAndEpoch | None = None  # DivergingEpoch: (epoch, end offset)
    # SnapshotId: the fetch offset is not in the leader's log (or the fetcher has none): fetch this
    # snapshot with FetchSnapshot, then fetch the log from its end offset.
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotRequest:
    correlation_id: int
    replica_id: int
    replica_directory_id: uuid.UUID = ZERO_UUID  # FetchSnapshot v1+
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int  # the byte of the snapshot to send from: what the fetcher already has
    max_bytes: int = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = -1  # the whole snapshot's
    position: int = -1
    data: bytes = b""  # UnalignedRecords: the bytes from ``position``, not cut at batch bounds


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateVoterRequest:
    """UpdateRaftVoter: a voter tells the leader its key, endpoints and kraft.version range (KIP-853)."""

    correlation_id: int
    current_leader_epoch: int
    voter: VoterNode


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateVoterResponse:
    correlation_id: int
    error_code: ErrorCode
    leader_id: int  # CurrentLeader
    leader_epoch: int


RaftRequest = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
               | UpdateVoterRequest)
RaftResponse = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                | FetchSnapshotResponse | UpdateVoterResponse)
RaftMessage = RaftRequest | RaftResponse


@dataclass(frozen=True, slots=True)
class LogAppended:
    """The core appended ``batch`` to the log."""

    batch: RaftBatch


@dataclass(frozen=True, slots=True)
class LogTruncated:
    """The core cut the log at ``offset`` (a follower's log diverged from its leader's)."""

    offset: int


@dataclass(slots=True)
class RaftOutput:
    """What one input made the core do. The driver makes ``quorum_state`` and ``log_changes``
    durable (writes quorum-state, flushes the log) before it sends ``messages`` or publishes
    ``high_watermark``: a vote is on disk before it is granted, a record before it counts as
    replicated on this replica."""

    messages: list[tuple[int, RaftMessage]] = field(default_factory=list)
    quorum_state: QuorumState | None = None  # QuorumStateData v1 to persist (the latest one wins)
    log_changes: list[LogAppended | LogTruncated] = field(default_factory=list)
    high_watermark: int | None = None  # the committed offset moved here (exclusive, Kafka's HW)
    leader_changed: bool = False  # the epoch or its known leader changed
    # A snapshot fetched from the leader replaced the log: the state is to be loaded from it.
    snapshot_loaded: OffsetAndEpoch | None = None
