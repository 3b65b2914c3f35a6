"""AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter on a controller of a dynamic quorum (KIP-853),
as Kafka's KafkaRaftClient takes them before its handlers: the cluster id checked, only the leader
acting (NOT_LEADER_OR_FOLLOWER elsewhere, the tools then ask the active controller), the voter's
endpoints including this quorum's controller listener. A voter to be added is asked its ApiVersions
first (its kraft.version range, and that it is up at all); the core (raft_reconfig) decides the rest.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.quorum.driver import RaftDriver
from grete.coordinator.kraft.voters import Endpoint, VoterNode
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

API_VERSIONS_VERSION = 4  # lists kraft.version, whose minimum level is 0 (v3 leaves it out)
KRAFT_VERSION = "kraft.version"


def check_request(driver: RaftDriver, cluster_id: str | None, directory_id: uuid.UUID | None = None) -> None:
    if cluster_id is not None and cluster_id != driver.cluster_id:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, None)
    if not driver.leads:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "this controller does not lead the metadata quorum")
    if directory_id is not None and directory_id == ZERO_UUID:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a voter's directory id must be set")


def endpoints_with_listener(driver: RaftDriver, endpoints: tuple[Endpoint, ...]) -> Endpoint:
    found = next((e for e in endpoints if e.listener == driver.listener), None)
    if found is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Voter endpoints {[e.listener for e in endpoints]} do not "
                                                    f"contain an endpoint for the listener {driver.listener}")
    return found


async def kraft_versions(driver: RaftDriver, address: Endpoint) -> tuple[int, int]:
    """The kraft.version range the node at ``address`` supports, from its ApiVersions; (0, 0) when it
    lists none (Kafka's AddVoterHandler reads it so); REQUEST_TIMED_OUT when it does not answer."""
    peer = PeerConnection(address.host, address.port, f"raft-client-{driver.node_id}",
                          timeout_s=driver.request_timeout_s)
    try:
        response: ApiVersionsResponse = await peer.call(
            ApiVersionsRequest(client_software_name="grete", client_software_version="1"), API_VERSIONS_VERSION)
    except PeerError as exc:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"New voter at {address.host}:{address.port} is not ready "
                                                      f"to receive requests: {exc}") from None
    finally:
        peer.close()
    if response.error_code:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "Aborted add voter operation since API_VERSIONS returned "
                                                      f"an error {ErrorCode(response.error_code).name}")
    found = next((f for f in response.supported_features if f.name == KRAFT_VERSION), None)
    return (0, 0) if found is None else (found.min_version, found.max_version)


async def add_voter(driver: RaftDriver, cluster_id: str | None, node_id: int, directory_id: uuid.UUID,
                    endpoints: tuple[Endpoint, ...], ack_when_committed: bool) -> None:
    check_request(driver, cluster_id, directory_id)
    address = endpoints_with_listener(driver, endpoints)
    versions = await kraft_versions(driver, address)
    check_request(driver, None)  # it may have lost the leadership meanwhile
    node = VoterNode(node_id, directory_id, endpoints, versions)
    await driver.change_voters(lambda now: driver.raft.add_voter(node, now), ack_when_committed)


async def remove_voter(driver: RaftDriver, cluster_id: str | None, node_id: int, directory_id: uuid.UUID) -> None:
    check_request(driver, cluster_id)
    await driver.change_voters(lambda now: driver.raft.remove_voter(node_id, directory_id, now))


async def update_voter(driver: RaftDriver, node: VoterNode) -> None:
    endpoints_with_listener(driver, node.endpoints)
    await driver.change_voters(lambda now: driver.raft.update_voter(node, driver.listener, now), False)


async def outcome(change: Awaitable[None], timeout_s: float) -> tuple[ErrorCode, str | None]:
    """(error, message) of an Add/RemoveRaftVoter as its answer carries them: NONE once committed,
    the refusal's, or REQUEST_TIMED_OUT when the new voter set is not committed in ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            await change
    except KafkaError as exc:
        return exc.code, exc.message
    except TimeoutError:
        return ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the new voter set to be committed"
    return ErrorCode.NONE, None
