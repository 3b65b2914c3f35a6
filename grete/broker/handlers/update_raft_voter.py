"""UpdateRaftVoter (82): v0, a voter of a dynamic KRaft quorum tells the leader its endpoints and
kraft.version range (KIP-853; Kafka's followers send it when the voter set differs from them), served
by a controller of a quorum of several: the leader appends the updated voter set and answers at once,
naming itself (CurrentLeader) as Kafka's UpdateVoterHandler does."""

from __future__ import annotations

from grete.broker.quorum.voter_changes import check_request, update_voter
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.coordinator.kraft.voters import Endpoint, VoterNode
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, UpdateRaftVoterRequest, UpdateRaftVoterResponse


@api(ApiKey.UPDATE_RAFT_VOTER, 0, 0)
async def handle(ctx: RequestContext, request: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    error = ErrorCode.NONE
    try:
        check_request(driver, request.cluster_id, request.voter_directory_id)
        if request.current_leader_epoch != driver.raft.epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if request.current_leader_epoch < driver.raft.epoch \
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            raise KafkaError(code, None)
        feature = request.k_raft_version_feature
        node = VoterNode(request.voter_id, request.voter_directory_id,
                         tuple(Endpoint(e.name, e.host, e.port) for e in request.listeners),
                         (feature.min_supported_version, feature.max_supported_version))
        await update_voter(driver, node)
    except KafkaError as exc:
        error = exc.code
    leader, epoch, _hw = driver.describe()
    address = driver.address_of(leader) if leader >= 0 else None
    current = UpdateRaftVoterResponse.CurrentLeader(leader_id=leader, leader_epoch=epoch,
                                                    host=address.host if address else "",
                                                    port=address.port if address else -1)
    return UpdateRaftVoterResponse(error_code=error, current_leader=current)
