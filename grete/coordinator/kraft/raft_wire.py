"""The Raft core's messages as Kafka's RPCs (the generated codecs) and back, for the one partition
``__cluster_metadata-0``.

``to_wire`` wraps a core message in its RPC's topics/partitions arrays; ``from_wire`` takes the
single partition back out, with the correlation id of the request header (for a response: the id of
the request it answers). A pre-vote is Vote v2 with PreVote=true (KIP-996): the codec refuses to
write it at v0-1, as Kafka's does (a Kafka prospective then runs a real election). Fetch carries
record batches in Kafka's v2 format: every record of a RaftBatch keyless (metadata records), or the
LeaderChangeMessage control record of a control batch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeVar

from grete.coordinator.kraft import raft_messages as core
from grete.coordinator.kraft.raft_log import OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.raft_segment_log import encode_raft_batch, raft_batches
from grete.coordinator.kraft.voters import Endpoint
from grete.protocol import messages as wire
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode
from grete.protocol.topics import METADATA_TOPIC

# Kafka's Topic.CLUSTER_METADATA_TOPIC_ID: Fetch v13+ names __cluster_metadata by this id only.
METADATA_TOPIC_ID = uuid.UUID(int=1)

_Node = TypeVar("_Node", wire.VoteResponse.NodeEndpoint, wire.BeginQuorumEpochResponse.NodeEndpoint,
                wire.EndQuorumEpochResponse.NodeEndpoint, wire.FetchResponse.NodeEndpoint,
                wire.FetchSnapshotResponse.NodeEndpoint)


@dataclass(frozen=True, slots=True)
class Addressing:
    """What the wire carries beyond the core's message: the destination's voter key (Vote and
    BeginQuorumEpoch v1+ name it: Kafka refuses one naming another voter, INVALID_VOTER_KEY), the
    leader's endpoints a response names (NodeEndpoints, so a replica that learns the leader from
    an answer can reach it) and a new leader's own listeners (BeginQuorumEpoch's LeaderEndpoints)."""

    destination: int = -1
    destination_directory: uuid.UUID = ZERO_UUID
    leader: tuple[int, str, int] | None = None  # (node id, host, port) on the request's listener
    listeners: tuple[Endpoint, ...] = ()


NO_ADDRESSING = Addressing()


def to_wire(message: core.RaftMessage, cluster_id: str | None, timestamp_ms: int = 0,
            addressing: Addressing = NO_ADDRESSING) -> Message:
    """The RPC for ``message``; ``timestamp_ms`` stamps the record batches a fetch answer builds."""
    a = addressing
    match message:
        case core.VoteRequest():
            return wire.VoteRequest(cluster_id=cluster_id, voter_id=a.destination, topics=[wire.VoteRequest.TopicData(
                topic_name=METADATA_TOPIC, partitions=[wire.VoteRequest.PartitionData(
                    replica_epoch=message.candidate_epoch - _pre_vote_bump(message.pre_vote),
                    replica_id=message.candidate_id, replica_directory_id=message.candidate_directory_id,
                    voter_directory_id=a.destination_directory, last_offset_epoch=message.last_offset_epoch,
                    last_offset=message.last_offset, pre_vote=message.pre_vote)])])
        case core.VoteResponse():
            return wire.VoteResponse(node_endpoints=_nodes(wire.VoteResponse.NodeEndpoint, a), topics=[wire.VoteResponse.TopicData(
                topic_name=METADATA_TOPIC, partitions=[wire.VoteResponse.PartitionData(
                    error_code=message.error_code, leader_id=message.leader_id, leader_epoch=message.leader_epoch,
                    vote_granted=message.vote_granted)])])
        case core.BeginQuorumEpochRequest():
            return wire.BeginQuorumEpochRequest(
                cluster_id=cluster_id, voter_id=a.destination,
                leader_endpoints=[wire.BeginQuorumEpochRequest.LeaderEndpoint(name=e.listener, host=e.host, port=e.port)
                                  for e in a.listeners],
                topics=[wire.BeginQuorumEpochRequest.TopicData(
                    topic_name=METADATA_TOPIC, partitions=[wire.BeginQuorumEpochRequest.PartitionData(
                        voter_directory_id=a.destination_directory, leader_id=message.leader_id,
                        leader_epoch=message.leader_epoch)])])
        case core.BeginQuorumEpochResponse():
            return wire.BeginQuorumEpochResponse(node_endpoints=_nodes(wire.BeginQuorumEpochResponse.NodeEndpoint, a), topics=[wire.BeginQuorumEpochResponse.TopicData(
                topic_name=METADATA_TOPIC, partitions=[wire.BeginQuorumEpochResponse.PartitionData(
                    error_code=message.error_code, leader_id=message.leader_id, leader_epoch=message.leader_epoch)])])
        case core.EndQuorumEpochRequest():
            return wire.EndQuorumEpochRequest(
                cluster_id=cluster_id,
                leader_endpoints=[wire.EndQuorumEpochRequest.LeaderEndpoint(name=e.listener, host=e.host, port=e.port)
                                  for e in a.listeners],
                topics=[wire.EndQuorumEpochRequest.TopicData(
                topic_name=METADATA_TOPIC, partitions=[wire.EndQuorumEpochRequest.PartitionData(
                    leader_id=message.leader_id, leader_epoch=message.leader_epoch,
                    preferred_successors=list(message.preferred_successors),
                    preferred_candidates=[wire.EndQuorumEpochRequest.ReplicaInfo(candidate_id=c)
                                          for c in message.preferred_successors])])])
        case core.EndQuorumEpochResponse():
            return wire.EndQuorumEpochResponse(node_endpoints=_nodes(wire.EndQuorumEpochResponse.NodeEndpoint, a), topics=[wire.EndQuorumEpochResponse.TopicData(
                topic_name=METADATA_TOPIC, partitions=[wire.EndQuorumEpochResponse.PartitionData(
                    error_code=message.error_code, leader_id=message.leader_id, leader_epoch=message.leader_epoch)])])
        case core.FetchRequest():
            return _fetch_request(message, cluster_id)
        case core.FetchResponse():
            response = _fetch_response(message, timestamp_ms)
            response.node_endpoints = _nodes(wire.FetchResponse.NodeEndpoint, a)
            return response
        case core.FetchSnapshotRequest():
            return _fetch_snapshot_request(message, cluster_id)
        case core.FetchSnapshotResponse():
            snapshot = _fetch_snapshot_response(message)
            snapshot.node_endpoints = _nodes(wire.FetchSnapshotResponse.NodeEndpoint, a)
            return snapshot
        case core.UpdateVoterRequest():
            v = message.voter
            return wire.UpdateRaftVoterRequest(
                cluster_id=cluster_id, current_leader_epoch=message.current_leader_epoch, voter_id=v.node_id,
                voter_directory_id=v.directory_id,
                listeners=[wire.UpdateRaftVoterRequest.Listener(name=e.listener, host=e.host, port=e.port)
                           for e in v.endpoints],
                k_raft_version_feature=wire.UpdateRaftVoterRequest.KRaftVersionFeature(
                    min_supported_version=v.kraft_versions[0], max_supported_version=v.kraft_versions[1]))
    raise TypeError(f"not a Raft message: {message!r}")


def _nodes(kind: type[_Node], a: Addressing) -> list[_Node]:
    if a.leader is None:
        return []
    node_id, host, port = a.leader
    return [kind(node_id=node_id, host=host, port=port)]


def node_endpoints(message: Message) -> list[tuple[int, str, int]]:
    """(node id, host, port) of the NodeEndpoints a response carries, if any."""
    return [(e.node_id, e.host, e.port) for e in getattr(message, "node_endpoints", ())]


def _pre_vote_bump(pre_vote: bool) -> int:
    """The core's pre-vote names the epoch its candidacy would bump to; Kafka's ReplicaEpoch names the
    epoch the prospective is in (KafkaRaftClient sends quorum.epoch() unbumped, and a voter behind it
    adopts that epoch), so the two differ by one for a pre-vote and not at all for a vote."""
    return 1 if pre_vote else 0


def _fetch_request(message: core.FetchRequest, cluster_id: str | None) -> wire.FetchRequest:
    """Fetch v15+ (the replica in ReplicaState), as Kafka 4's replicas send it; v18 carries the
    fetcher's high watermark (KIP-1166)."""
    return wire.FetchRequest(
        cluster_id=cluster_id,
        replica_state=wire.FetchRequest.ReplicaState(replica_id=message.replica_id),
        topics=[wire.FetchRequest.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[wire.FetchRequest.FetchPartition(
            current_leader_epoch=message.current_leader_epoch, fetch_offset=message.fetch_offset,
            last_fetched_epoch=message.last_fetched_epoch, high_watermark=message.high_watermark,
            replica_directory_id=message.replica_directory_id)])])


def _fetch_response(message: core.FetchResponse, timestamp_ms: int) -> wire.FetchResponse:
    partition = wire.FetchResponse.PartitionData(
        error_code=message.error_code, high_watermark=message.high_watermark,
        current_leader=wire.FetchResponse.LeaderIdAndEpoch(leader_id=message.leader_id,
                                                           leader_epoch=message.leader_epoch),
        records=encode_batches(message.batches, timestamp_ms))
    if message.diverging_epoch is not None:
        partition.diverging_epoch = wire.FetchResponse.EpochEndOffset(
            epoch=message.diverging_epoch.epoch, end_offset=message.diverging_epoch.offset)
    if message.snapshot_id is not None:
        partition.snapshot_id = wire.FetchResponse.SnapshotId(end_offset=message.snapshot_id.offset,
                                                              epoch=message.snapshot_id.epoch)
    return wire.FetchResponse(responses=[wire.FetchResponse.FetchableTopicResponse(
        topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[partition])])


def _fetch_snapshot_request(message: core.FetchSnapshotRequest, cluster_id: str | None) -> wire.FetchSnapshotRequest:
    snapshot = wire.FetchSnapshotRequest.SnapshotId(end_offset=message.snapshot_id.offset, epoch=message.snapshot_id.epoch)
    return wire.FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=message.replica_id, max_bytes=message.max_bytes,
        topics=[wire.FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[
            wire.FetchSnapshotRequest.PartitionSnapshot(
                partition=0, current_leader_epoch=message.current_leader_epoch, snapshot_id=snapshot,
                position=message.position, replica_directory_id=message.replica_directory_id)])])


def _fetch_snapshot_response(message: core.FetchSnapshotResponse) -> wire.FetchSnapshotResponse:
    found = message.snapshot_id or OffsetAndEpoch(-1, -1)
    return wire.FetchSnapshotResponse(topics=[wire.FetchSnapshotResponse.TopicSnapshot(name=METADATA_TOPIC, partitions=[
        wire.FetchSnapshotResponse.PartitionSnapshot(
            index=0, error_code=message.error_code,
            snapshot_id=wire.FetchSnapshotResponse.SnapshotId(end_offset=found.offset, epoch=found.epoch),
            current_leader=wire.FetchSnapshotResponse.LeaderIdAndEpoch(leader_id=message.leader_id,
                                                                       leader_epoch=message.leader_epoch),
            size=message.size, position=message.position, unaligned_records=message.data)])])


def encode_batches(batches: tuple[RaftBatch, ...], timestamp_ms: int) -> bytes:
    return b"".join(encode_raft_batch(batch, timestamp_ms) for batch in batches)


decode_batches = raft_batches


def from_wire(message: Message, correlation_id: int) -> core.RaftMessage:
    """The core's message for an RPC of ``__cluster_metadata-0`` (its first topic and partition)."""
    cid = correlation_id
    match message:
        case wire.VoteRequest():
            v = message.topics[0].partitions[0]
            return core.VoteRequest(correlation_id=cid, candidate_epoch=v.replica_epoch + _pre_vote_bump(v.pre_vote),
                                    candidate_id=v.replica_id, last_offset_epoch=v.last_offset_epoch,
                                    last_offset=v.last_offset, pre_vote=v.pre_vote,
                                    candidate_directory_id=v.replica_directory_id)
        case wire.VoteResponse():
            r = message.topics[0].partitions[0] if message.topics else None
            if r is None:
                return core.VoteResponse(correlation_id=cid, error_code=ErrorCode(message.error_code), leader_id=-1,
                                         leader_epoch=-1, vote_granted=False)
            return core.VoteResponse(correlation_id=cid, error_code=ErrorCode(r.error_code), leader_id=r.leader_id,
                                     leader_epoch=r.leader_epoch, vote_granted=r.vote_granted)
        case wire.BeginQuorumEpochRequest():
            b = message.topics[0].partitions[0]
            return core.BeginQuorumEpochRequest(correlation_id=cid, leader_id=b.leader_id, leader_epoch=b.leader_epoch)
        case wire.BeginQuorumEpochResponse():
            e, leader, epoch = _epoch_answer(message.error_code, message.topics)
            return core.BeginQuorumEpochResponse(correlation_id=cid, error_code=e, leader_id=leader, leader_epoch=epoch)
        case wire.EndQuorumEpochRequest():
            q = message.topics[0].partitions[0]
            successors = [c.candidate_id for c in q.preferred_candidates] or q.preferred_successors
            return core.EndQuorumEpochRequest(correlation_id=cid, leader_id=q.leader_id, leader_epoch=q.leader_epoch,
                                              preferred_successors=tuple(successors))
        case wire.EndQuorumEpochResponse():
            e, leader, epoch = _epoch_answer(message.error_code, message.topics)
            return core.EndQuorumEpochResponse(correlation_id=cid, error_code=e, leader_id=leader, leader_epoch=epoch)
        case wire.FetchRequest():
            f = message.topics[0].partitions[0]
            replica = message.replica_state.replica_id if message.replica_state.replica_id >= 0 else message.replica_id
            return core.FetchRequest(correlation_id=cid, replica_id=replica,
                                     current_leader_epoch=f.current_leader_epoch, fetch_offset=f.fetch_offset,
                                     last_fetched_epoch=f.last_fetched_epoch, high_watermark=f.high_watermark,
                                     replica_directory_id=f.replica_directory_id)
        case wire.FetchResponse():
            return _from_fetch_response(message, cid)
        case wire.FetchSnapshotRequest():
            s = message.topics[0].partitions[0]
            return core.FetchSnapshotRequest(
                correlation_id=cid, replica_id=message.replica_id, replica_directory_id=s.replica_directory_id,
                current_leader_epoch=s.current_leader_epoch, position=s.position, max_bytes=message.max_bytes,
                snapshot_id=OffsetAndEpoch(s.snapshot_id.epoch, s.snapshot_id.end_offset))
        case wire.FetchSnapshotResponse():
            return _from_fetch_snapshot_response(message, cid)
        case wire.UpdateRaftVoterResponse():
            current = message.current_leader
            return core.UpdateVoterResponse(correlation_id=cid, error_code=ErrorCode(message.error_code),
                                            leader_id=current.leader_id, leader_epoch=current.leader_epoch)
    raise TypeError(f"not a KRaft RPC: {type(message).__name__}")


def _epoch_answer(top_error: int, topics: list[wire.BeginQuorumEpochResponse.TopicData]
                  | list[wire.EndQuorumEpochResponse.TopicData]) -> tuple[ErrorCode, int, int]:
    """(error, leader, epoch) of a BeginQuorumEpoch or EndQuorumEpoch answer."""
    if not topics or not topics[0].partitions:
        return ErrorCode(top_error), -1, -1
    p = topics[0].partitions[0]
    return ErrorCode(top_error or p.error_code), p.leader_id, p.leader_epoch


def _from_fetch_response(message: wire.FetchResponse, cid: int) -> core.FetchResponse:
    if not message.responses or not message.responses[0].partitions:
        return core.FetchResponse(correlation_id=cid, error_code=ErrorCode(message.error_code), leader_id=-1,
                                  leader_epoch=-1, high_watermark=0)
    p = message.responses[0].partitions[0]
    diverging = None
    if p.diverging_epoch.epoch >= 0 and p.diverging_epoch.end_offset >= 0:
        diverging = OffsetAndEpoch(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
    snapshot = None
    if p.snapshot_id.epoch >= 0 and p.snapshot_id.end_offset >= 0:
        snapshot = OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset)
    records = p.records if isinstance(p.records, bytes | bytearray | memoryview) else None
    return core.FetchResponse(correlation_id=cid, error_code=ErrorCode(message.error_code or p.error_code),
                              leader_id=p.current_leader.leader_id, leader_epoch=p.current_leader.leader_epoch,
                              high_watermark=p.high_watermark, batches=() if snapshot else decode_batches(records),
                              diverging_epoch=diverging, snapshot_id=snapshot)


def _from_fetch_snapshot_response(message: wire.FetchSnapshotResponse, cid: int) -> core.FetchSnapshotResponse:
    if not message.topics or not message.topics[0].partitions:
        return core.FetchSnapshotResponse(correlation_id=cid, error_code=ErrorCode(message.error_code),
                                          leader_id=-1, leader_epoch=-1)
    p = message.topics[0].partitions[0]
    found = None
    if p.snapshot_id.epoch >= 0 and p.snapshot_id.end_offset >= 0:
        found = OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset)
    data = p.unaligned_records
    return core.FetchSnapshotResponse(
        correlation_id=cid, error_code=ErrorCode(message.error_code or p.error_code),
        leader_id=p.current_leader.leader_id, leader_epoch=p.current_leader.leader_epoch, snapshot_id=found,
        size=p.size, position=p.position, data=bytes(data) if isinstance(data, bytes | bytearray | memoryview) else b"")
