"""KRaft's voter RPCs as a controller serves them: Vote, BeginQuorumEpoch, EndQuorumEpoch, the
Fetch of ``__cluster_metadata`` and FetchSnapshot go to the Raft driver, which answers with the core's decision.

As Kafka's KafkaRaftClient checks before the core sees a request: a cluster id other than the
quorum's is INCONSISTENT_CLUSTER_ID for the whole request (a request without one is taken, as from
older peers), and a request must name ``__cluster_metadata`` partition 0 alone (else INVALID_REQUEST).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grete.coordinator.kraft import raft_messages as core
from grete.coordinator.kraft.raft_wire import METADATA_TOPIC_ID, from_wire, to_wire
from grete.protocol import messages as wire
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode
from grete.protocol.topics import METADATA_TOPIC

if TYPE_CHECKING:
    from grete.broker.quorum.driver import RaftDriver
    from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import Basics

QuorumRequest = (wire.VoteRequest | wire.BeginQuorumEpochRequest | wire.EndQuorumEpochRequest | wire.FetchRequest
                 | wire.FetchSnapshotRequest)


def is_metadata_fetch(request: wire.FetchRequest) -> bool:
    """A Fetch of the metadata partition (by name before v13, by its fixed topic id after)."""
    return len(request.topics) == 1 and (request.topics[0].topic_id == METADATA_TOPIC_ID
                                         or request.topics[0].topic == METADATA_TOPIC)


def _sender(message: core.RaftRequest) -> int:
    match message:
        case core.VoteRequest():
            return message.candidate_id
        case core.FetchRequest() | core.FetchSnapshotRequest():
            return message.replica_id
        case core.UpdateVoterRequest():
            return message.voter.node_id
        case _:
            return message.leader_id


def _names_the_partition(request: QuorumRequest) -> bool:
    if isinstance(request, wire.FetchRequest):
        return is_metadata_fetch(request) and [p.partition for p in request.topics[0].partitions] == [0]
    if isinstance(request, wire.FetchSnapshotRequest):
        return (len(request.topics) == 1 and request.topics[0].name == METADATA_TOPIC
                and [p.partition for p in request.topics[0].partitions] == [0])
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC
            and [p.partition_index for p in topics[0].partitions] == [0])


def _refusal(request: QuorumRequest, error: ErrorCode) -> Message:
    response: Message = wire.APIS[type(request).API_KEY].response()
    response.error_code = error  # type: ignore[attr-defined]  # every voter RPC's answer has one
    return response


async def answer(ctx: RequestContext[Basics], driver: RaftDriver, request: QuorumRequest) -> Message:
    """The answer to one voter RPC from another replica of the quorum."""
    if request.cluster_id is not None and request.cluster_id != driver.cluster_id:
        return _refusal(request, ErrorCode.INCONSISTENT_CLUSTER_ID)
    if not _names_the_partition(request):
        return _refusal(request, ErrorCode.INVALID_REQUEST)
    message = from_wire(request, ctx.correlation_id)
    assert isinstance(message, core.VoteRequest | core.BeginQuorumEpochRequest | core.EndQuorumEpochRequest
                      | core.FetchRequest | core.FetchSnapshotRequest)
    response = await driver.handle(_sender(message), message)
    return to_wire(response, None, timestamp_ms=ctx.broker.now_ms(), addressing=driver.addressing())
