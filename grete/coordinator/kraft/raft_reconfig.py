"""A dynamic quorum's leader changes its voters (KIP-853): AddRaftVoter, RemoveRaftVoter and
UpdateRaftVoter, as Kafka's AddVoterHandler, RemoveVoterHandler and UpdateVoterHandler decide them;
a static quorum's leader keeps what its voters tell it in memory and turns the quorum dynamic on an
upgrade of kraft.version to 1; a voter tells each new leader its endpoints (UpdateRaftVoter).

One change at a time: a change is refused (REQUEST_TIMED_OUT, Kafka's answer, so tools retry) until
the leader's high watermark is known and the previous voter set is committed. The new set is one
VotersRecord in a control batch of the leader's epoch; it applies from its append (the leader counts
the new voters at once) and the request is answered once it is committed (the driver waits). A voter
joins only after fetching as an observer and catching up with the leader's log end; a leader that
removes itself resigns once its removal is committed (raft_leader's poll).
"""

from __future__ import annotations

import uuid

from grete.coordinator.kraft.raft_leader import LeaderRole
from grete.coordinator.kraft.raft_messages import RaftOutput, UpdateVoterRequest, UpdateVoterResponse
from grete.coordinator.kraft.raft_states import Follower, Leader
from grete.coordinator.kraft.voters import VoterNode, VoterSet
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import KRaftVersionRecord
from grete.protocol.metadata_frame import encode_control_value
from grete.protocol.records.control import ControlType

CAUGHT_UP_WITHIN_MS = 3_600_000  # Kafka's isReplicaCaughtUp: caught up once, fetched within the hour


class ReconfigRole(LeaderRole):
    def add_voter(self, node: VoterNode, now_ms: int) -> RaftOutput:
        """Append the voter set with ``node`` (whose kraft.version range its ApiVersions gave)."""
        state, voters = self._change_allowed("adding voter", now_ms)
        if node.node_id in voters.ids:
            raise KafkaError(ErrorCode.DUPLICATE_VOTER, f"The voter id for {_key(node.node_id, node.directory_id)} is "
                                                        f"already part of the set of voters {_keys(voters)}.")
        low, high = node.kraft_versions
        if not low <= self.history.kraft_version <= high:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Aborted add voter operation for {_key(node.node_id, node.directory_id)} "
                                                        f"since the kraft.version range (min: {low}, max: {high}) doesn't "
                                                        f"support the finalized version {self.history.kraft_version}")
        progress = state.progress.get(node.node_id)
        if (progress is None or progress.directory_id != node.directory_id or progress.last_caught_up_ms <= 0
                or progress.last_fetch_ms <= now_ms - CAUGHT_UP_WITHIN_MS):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Aborted add voter operation for "
                                                          f"{_key(node.node_id, node.directory_id)} since it is lagging behind")
        return self._append_voters(state, voters.with_node(node), now_ms)

    def remove_voter(self, node_id: int, directory_id: uuid.UUID, now_ms: int) -> RaftOutput:
        state, voters = self._change_allowed("removing voter", now_ms)
        node = voters.nodes.get(node_id)
        if node is None or node.directory_id != directory_id or len(voters.nodes) == 1:
            raise KafkaError(ErrorCode.VOTER_NOT_FOUND, f"Cannot remove voter {_key(node_id, directory_id)} from "
                                                        f"the set of voters {_keys(voters)}")
        return self._append_voters(state, voters.without(node_id), now_ms)

    def update_voter(self, node: VoterNode, listener: str, now_ms: int) -> RaftOutput:
        """A voter's new endpoints or kraft.version range (UpdateRaftVoter)."""
        state = self.state
        if isinstance(state, Leader) and not self.history.dynamic:
            return self._update_volatile(state, node, listener)
        state, voters = self._change_allowed("updating voter", now_ms)
        current = voters.nodes.get(node.node_id)
        if current is None or not current.is_key(node.node_id, node.directory_id):
            raise KafkaError(ErrorCode.VOTER_NOT_FOUND, f"Update voter didn't find {_key(node.node_id, node.directory_id)} "
                                                        f"in the set of voters {_keys(voters)}")
        if node.address(listener) is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Update voter request didn't include the endpoint for {listener}")
        if not node.kraft_versions[0] <= self.history.kraft_version <= node.kraft_versions[1]:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Update voter request didn't support the finalized "
                                                        f"kraft.version {self.history.kraft_version}")
        if current == node:
            return self.drain()
        return self._append_voters(state, voters.with_node(node), now_ms)

    def _update_volatile(self, state: Leader, node: VoterNode, listener: str) -> RaftOutput:
        """UpdateRaftVoter on a static quorum (kraft.version 0), as Kafka's UpdateVoterHandler takes
        it: nothing is written; the leader keeps the voter's directory id, endpoints and range in
        memory, for an upgrade to kraft.version 1 (each new leader learns them again)."""
        if not state.high_watermark_known:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "Request timed out waiting for leader to establish HWM "
                                                          "and fence previous voter changes")
        volatile = state.volatile_voters
        if volatile is None:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "Request timed out waiting for the upgrade of kraft.version")
        if not node.kraft_versions[0] <= self.history.kraft_version <= node.kraft_versions[1]:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Update voter request didn't support the finalized "
                                                        f"kraft.version {self.history.kraft_version}")
        if node.address(listener) is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Update voter request didn't include the endpoint for {listener}")
        if node.node_id not in volatile.nodes:
            raise KafkaError(ErrorCode.VOTER_NOT_FOUND, f"Update voter didn't find {_key(node.node_id, node.directory_id)} "
                                                        f"in the set of voters {_keys(volatile)}")
        state.volatile_voters = volatile.with_node(node)  # the stored directory id is not checked: it has none
        return self.drain()

    def upgrade_kraft_version(self, version: int, validate_only: bool, now_ms: int) -> RaftOutput:
        """UpdateFeatures' kraft.version on the leader (Kafka's maybeAppendUpgradedKRaftVersion): a
        static quorum becomes a dynamic one once every voter told this leader its directory id,
        endpoints and a range with ``version`` (UpdateRaftVoter). One control batch: the new
        KRaftVersionRecord and the voter set, in effect from its append; the same version again is
        nothing to do, a lower one refused."""
        state = self.state
        if not isinstance(state, Leader):
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "Upgrade kraft version failed because the replica is not "
                                                       "the current leader")
        current = self.history.kraft_version
        if version == current:
            return self.drain()
        if version < current:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid upgrade of kraft.version from version "
                                                               f"KRAFT_VERSION_{current} to KRAFT_VERSION_{version} "
                                                               f"because the new version is a downgrade")
        volatile = state.volatile_voters
        if volatile is None:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid upgrade of kraft.version from version "
                                                               f"KRAFT_VERSION_{current} to KRAFT_VERSION_{version}")
        if not all(low <= version <= high for low, high in (n.kraft_versions for n in volatile.nodes.values())):
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid upgrade of kraft.version to "
                                                               f"KRAFT_VERSION_{version} because not all of the "
                                                               f"voters support it")
        if validate_only:
            return self.drain()
        state.volatile_voters = None
        records = (encode_control_value(KRaftVersionRecord(version=0, k_raft_version=version)),
                   encode_control_value(volatile.to_record()))
        self.leader_append(state, records, True, now_ms, (ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS))
        return self.drain()

    # --- a voter's side of UpdateRaftVoter --------------------------------------------------------
    def voter_update_due(self, state: Follower, now_ms: int) -> bool:
        """Kafka's pollFollowerAsVoter: a voter that knows its key and endpoints tells a new leader
        (kraft.version 0: until it has answered; 1: while the voter set differs from this voter)."""
        if (now_ms < state.update_voter_due or self.node_id not in self.voters or not self.local.endpoints
                or self.local.directory_id == ZERO_UUID):
            return False
        return self.history.latest.needs_update(self.local) if self.history.dynamic else not state.updated_leader

    def send_voter_update(self, state: Follower, now_ms: int) -> None:
        state.update_voter_due = now_ms + self.config.fetch_timeout_ms
        self.send_request(state.leader_id, now_ms, lambda cid: UpdateVoterRequest(
            correlation_id=cid, current_leader_epoch=state.epoch, voter=self.local))

    def voter_update_answered(self, state: Follower, response: UpdateVoterResponse, now_ms: int) -> None:
        """Taken (NONE), or a leader without the API (UNSUPPORTED_VERSION): this leader is told, and
        it counts as heard from. INVALID_REQUEST (Kafka stops on it as on a bug) ends the tries too;
        any other error is tried again a period later."""
        if response.error_code in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_VERSION):
            state.updated_leader = True
            state.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        elif response.error_code is ErrorCode.INVALID_REQUEST:
            state.updated_leader = True

    def _change_allowed(self, what: str, now_ms: int) -> tuple[Leader, VoterSet]:
        state = self.state
        if not isinstance(state, Leader):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader of the metadata quorum")
        if not state.high_watermark_known:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "Request timed out waiting for leader to establish HWM "
                                                          "and fence previous voter changes")
        if not self.history.dynamic:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Cluster doesn't support {what} because the kraft.version "
                                                            f"feature is {self.history.kraft_version}")
        if self.history.latest_offset >= self.high_watermark:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Request timed out waiting for voters to commit the latest "
                                                          f"voter change at {self.history.latest_offset} with HWM "
                                                          f"{self.high_watermark}")
        return state, self.history.latest

    def _append_voters(self, state: Leader, voters: VoterSet, now_ms: int) -> RaftOutput:
        self.leader_append(state, (encode_control_value(voters.to_record()),), True, now_ms, (ControlType.KRAFT_VOTERS,))
        return self.drain()


def _key(node_id: int, directory_id: uuid.UUID) -> str:
    return f"ReplicaKey(id={node_id}, directoryId={directory_id})"


def _keys(voters: VoterSet) -> str:
    return "[" + ", ".join(_key(n.node_id, n.directory_id) for n in voters.nodes.values()) + "]"
