"""RemoveRaftVoter (81): v0, remove a controller from a dynamic KRaft quorum (``kafka-metadata-quorum
remove-controller``, KIP-853), served by a controller of a quorum of several: the leader answers once
the new voter set is committed; a leader that removed itself then resigns.
grete/broker/quorum/voter_changes.py."""

from __future__ import annotations

from grete.broker.quorum.voter_changes import outcome, remove_voter
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.messages import ApiKey, RemoveRaftVoterRequest, RemoveRaftVoterResponse


@api(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    change = remove_voter(driver, request.cluster_id, request.voter_id, request.voter_directory_id)
    error, message = await outcome(change, driver.request_timeout_s)
    return RemoveRaftVoterResponse(error_code=error, error_message=message)
