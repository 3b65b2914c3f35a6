"""RemoveRaftVoter (81): v0, remove a controller from a dynamic KRaft quorum (``kafka-metadata-quorum
remove-controller``, KIP-853), served by a controller of a quorum of several: the leader answers once
the new voter set is committed; a leader that removed itself then resigns.
grete/broker/quorum/voter_changes.py."""

from __future__ import annotations

import asyncio

from grete.broker.quorum.voter_changes import check_request, remove_voter
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, RemoveRaftVoterRequest, RemoveRaftVoterResponse


@api(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
async def handle(ctx: RequestContext, request: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    try:
        check_request(driver, request.cluster_id)
        async with asyncio.timeout(driver.request_timeout_s):
            await remove_voter(driver, request.voter_id, request.voter_directory_id)
    except KafkaError as exc:
        return RemoveRaftVoterResponse(error_code=exc.code, error_message=exc.message)
    except TimeoutError:
        return RemoveRaftVoterResponse(error_code=ErrorCode.REQUEST_TIMED_OUT,
                                       error_message="Timed out waiting for the new voter set to be committed")
    return RemoveRaftVoterResponse(error_code=ErrorCode.NONE)
