"""A dynamic quorum's leader changes its voters (KIP-853): AddRaftVoter, RemoveRaftVoter and
UpdateRaftVoter, as Kafka's AddVoterHandler, RemoveVoterHandler and UpdateVoterHandler decide them.

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
from grete.coordinator.kraft.raft_messages import RaftOutput
from grete.coordinator.kraft.raft_states import Leader
from grete.coordinator.kraft.voters import VoterNode, VoterSet
from grete.protocol.errors import ErrorCode, KafkaError
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
