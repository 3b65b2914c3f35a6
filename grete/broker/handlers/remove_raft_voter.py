"""RemoveRaftVoter (81): v0, remove a controller from a dynamic KRaft quorum (``kafka-metadata-quorum
remove-controller``, KIP-853), served by a controller of a quorum of several: the leader answers once
the new voter set is committed; a leader that removed itself then resigns.
grete/broker/quorum/voter_changes.py. A KRaft broker forwards it to the active controller and relays
the answer, as Kafka's brokers do (``--bootstrap-server``). ALTER on the cluster is required (Kafka's
ControllerApis), else CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from grete.broker.quorum.voter_changes import outcome, remove_voter
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authz import CLUSTER_DENIED, Op, cluster_allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, RemoveRaftVoterRequest, RemoveRaftVoterResponse


@api(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    if not cluster_allowed(ctx, Op.ALTER):
        return RemoveRaftVoterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                       error_message=CLUSTER_DENIED)
    driver = ctx.broker.quorum
    if driver is None:  # a KRaft broker: the connection serves the API to no other node without a voter
        forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)
        assert isinstance(forwarded, RemoveRaftVoterResponse)
        return forwarded
    change = remove_voter(driver, request.cluster_id, request.voter_id, request.voter_directory_id)
    error, message = await outcome(change, driver.request_timeout_s)
    return RemoveRaftVoterResponse(error_code=error, error_message=message)
