"""AddRaftVoter (80): v0-1, add a controller to a dynamic KRaft quorum (``kafka-metadata-quorum
add-controller``, KIP-853), served by a controller of a quorum of several: the leader answers once
the new voter set is committed (or appended, v1's AckWhenCommitted=false); grete/broker/quorum/voter_changes.py.
A KRaft broker forwards it to the active controller and relays the answer, as Kafka's brokers do
(``--bootstrap-server``). ALTER on the cluster is required (Kafka's ControllerApis), else
CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from grete.broker.quorum.voter_changes import add_voter, outcome
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authz import CLUSTER_DENIED, Op, cluster_allowed
from grete.coordinator.kraft.voters import Endpoint
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AddRaftVoterRequest, AddRaftVoterResponse, ApiKey


@api(ApiKey.ADD_RAFT_VOTER, 0, 1)
async def handle(ctx: RequestContext[ClusterControl], request: AddRaftVoterRequest) -> AddRaftVoterResponse:
    if not cluster_allowed(ctx, Op.ALTER):
        return AddRaftVoterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED)
    driver = ctx.broker.quorum
    if driver is None:  # a KRaft broker: the connection serves the API to no other node without a voter
        forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)
        assert isinstance(forwarded, AddRaftVoterResponse)
        return forwarded
    endpoints = tuple(Endpoint(e.name, e.host, e.port) for e in request.listeners)
    change = add_voter(driver, request.cluster_id, request.voter_id, request.voter_directory_id, endpoints,
                       request.ack_when_committed or ctx.version == 0)
    error, message = await outcome(change, max(request.timeout_ms / 1000, driver.request_timeout_s))
    return AddRaftVoterResponse(error_code=error, error_message=message)
