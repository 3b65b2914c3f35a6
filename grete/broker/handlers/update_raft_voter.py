"""UpdateRaftVoter (82): v0, a voter tells the leader its directory id, endpoints and kraft.version
range (KIP-853; each voter tells each new leader, and a dynamic quorum's voters again while the voter
set differs from them), served by a controller of a quorum of several. A dynamic quorum's leader
appends the updated voter set; a static one's keeps it in memory for an upgrade of kraft.version
(raft_reconfig). The answer comes at once, naming the leader (CurrentLeader) as Kafka's
UpdateVoterHandler does."""

from __future__ import annotations

from grete.broker.quorum.voter_changes import check_request, update_voter
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.coordinator.kraft.voters import Endpoint, VoterNode
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, UpdateRaftVoterRequest, UpdateRaftVoterResponse


@api(ApiKey.UPDATE_RAFT_VOTER, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    error = ErrorCode.NONE
    feature = request.k_raft_version_feature
    low, high = feature.min_supported_version, feature.max_supported_version
    try:  # in the order of Kafka's checks
        if request.cluster_id is not None and request.cluster_id != driver.cluster_id:
            raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, None)
        if request.current_leader_epoch != driver.raft.epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if request.current_leader_epoch < driver.raft.epoch \
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            raise KafkaError(code, None)
        check_request(driver, None, request.voter_directory_id)
        if request.voter_id < 0 or low < 0 or high < low:
            raise KafkaError(ErrorCode.INVALID_REQUEST, None)
        node = VoterNode(request.voter_id, request.voter_directory_id,
                         tuple(Endpoint(e.name, e.host, e.port) for e in request.listeners), (low, high))
        await update_voter(driver, node)
    except KafkaError as exc:
        error = exc.code
    leader, epoch, _hw = driver.describe()
    address = driver.address_of(leader) if leader >= 0 else None
    current = UpdateRaftVoterResponse.CurrentLeader(leader_id=leader, leader_epoch=epoch,
                                                    host=address.host if address else "",
                                                    port=address.port if address else -1)
    return UpdateRaftVoterResponse(error_code=error, current_leader=current)
