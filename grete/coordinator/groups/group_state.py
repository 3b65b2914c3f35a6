"""In-memory state of one classic group: its members, generation, protocol and committed offsets.

This module holds data and the small invariant-keeping operations on it (adding and removing members,
protocol votes, generation bumps). Timers, parked requests and persistence are the coordinator's job
(``group.py`` and its parts); nothing here awaits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from grete.coordinator.groups.consumer_state import ConsumerGroup
from grete.coordinator.groups.group_types import JoinMember, JoinResult, SyncResult
from grete.coordinator.groups.offsets_format import subscription_topics
from grete.coordinator.groups.streams_state import StreamsGroup
from grete.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartition = tuple[str, int]


class GroupState(Enum):
    """Kafka's classic group states; ``.value`` is the name DescribeGroups/ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Which states each state may be entered from (Kafka's GroupMetadata.validPreviousStates).
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # set only by OffsetCommit v1-v4 with an explicit retention


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # A JoinGroup/SyncGroup response parked until the rebalance step completes.
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    # True from the first JoinGroup until its response: such members expire after the new-member
    # timeout even though they are "awaiting join".
    is_new: bool = False
    session_timer: asyncio.TimerHandle | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def metadata_or_empty(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes."""
        return list(protocols) == list(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState
    state_timestamp_ms: int
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    num_awaiting_join: int = 0
    # Set when a member joins a brand-new group during the initial delay, which extends the delay.
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # Seam for TxnOffsetCommit: producer id -> offsets staged until the transaction marker.
    pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    # Timers owned by the coordinator: the join (rebalance) deadline and the pending-sync deadline.
    join_timer: asyncio.TimerHandle | None = None
    # While true the join is held for group.initial.rebalance.delay.ms even if everyone has joined.
    initial_delay_active: bool = False
    sync_timer: asyncio.TimerHandle | None = None
    last_rebalance_reason: str = ""
    # Set while the group is a KIP-848 consumer group (type "consumer"): its members, epochs and
    # assignments live there; this object keeps the offsets and stays Empty as a classic group.
    consumer: ConsumerGroup | None = None
    # Set while the group is a KIP-1071 streams group (type "streams"), likewise.
    streams: StreamsGroup | None = None

    # ------------------------------------------------------------------------------- states

    def has_consumer_members(self) -> bool:
        """Members of the Kafka 4 protocols (a consumer or streams group): the group is not empty."""
        return (self.consumer is not None and bool(self.consumer.members)) or (
            self.streams is not None and bool(self.streams.members))

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------------------------ members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member, future: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.supported_protocols.update(set(member.protocol_names))
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)
        self._set_join_future(member, future)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(set(member.protocol_names))
        self.supported_protocols += Counter()  # drop zero counts
        if member.awaiting_join:
            self.num_awaiting_join -= 1
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, future: asyncio.Future[JoinResult] | None) -> None:
        self.supported_protocols.subtract(set(member.protocol_names))
        member.protocols = list(protocols)
        self.supported_protocols.update(set(member.protocol_names))
        self.supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._set_join_future(member, future)

    def _set_join_future(self, member: Member, future: asyncio.Future[JoinResult] | None) -> None:
        if future is None:
            return
        if member.join_future is not None and not member.join_future.done():
            # A second JoinGroup from the same member replaces the first (Kafka drops the first
            # callback; we answer it so nothing stays parked forever).
            member.join_future.set_result(JoinResult.failed(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        elif member.join_future is None:
            self.num_awaiting_join += 1
        member.join_future = future

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the static member a new member id; whoever still uses the old id is fenced."""
        member = self.members.pop(old_id)
        self.complete_join(member, JoinResult.failed(old_id, ErrorCode.FENCED_INSTANCE_ID))
        self.complete_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        if self.is_leader(old_id):
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return member

    def complete_join(self, member: Member, result: JoinResult) -> bool:
        future = member.join_future
        if future is None:
            return False
        member.join_future = None
        self.num_awaiting_join -= 1
        if not future.done():
            future.set_result(result)
        return True

    def complete_sync(self, member: Member, result: SyncResult) -> bool:
        future = member.sync_future
        if future is None:
            return False
        member.sync_future = None
        if not future.done():
            future.set_result(result)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ---------------------------------------------------------------------------- protocols

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[p] == n for p in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its preferred common protocol; the most votes win. Ties go to the
        protocol voted for first (Kafka leaves ties to hash order; we want determinism)."""
        n = len(self.members)
        candidates = {p for p, count in self.supported_protocols.items() if count == n}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        return next(p for p in votes if votes[p] == best)

    def current_member_metadata(self) -> list[JoinMember]:
        assert self.protocol_name is not None
        return [JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync = set(self.members)

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the consumer members subscribe to; None when unknown (not a consumer group or
        unreadable metadata), which offset expiry and OffsetDelete treat as "subscribed to nothing
        we know of"."""
        if not self.members:
            return set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscription_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return topics

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    # ------------------------------------------------------------------------------ offsets

    def has_pending_offset_commit(self, tp: TopicPartition) -> bool:
        return any(tp in staged for staged in self.pending_txn_offsets.values())

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets past retention, by Kafka's rules (KIP-211):

        * a group that had members and is now Empty: retention counts from when it became Empty;
        * a Stable consumer group: offsets of topics nobody subscribes to, counted from their commit;
        * a group only ever used for simple commits: counted from each commit;
        * an offset committed with an explicit retention (OffsetCommit v2-v4) expires at its own time.
        """
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            return self._expired(now_ms, retention_ms, use_state_time=True, keep_topics=set())
        if self.is_consumer_group() and self.subscribed_topics is not None and self.is_(GroupState.STABLE):
            return self._expired(now_ms, retention_ms, use_state_time=False, keep_topics=self.subscribed_topics)
        if self.protocol_type is None:
            return self._expired(now_ms, retention_ms, use_state_time=False, keep_topics=set())
        return []

    def _expired(self, now_ms: int, retention_ms: int, *, use_state_time: bool,
                 keep_topics: set[str]) -> list[TopicPartition]:
        expired = []
        for tp, committed in self.offsets.items():
            if tp[0] in keep_topics or self.has_pending_offset_commit(tp):
                continue
            if committed.expire_timestamp >= 0:
                if now_ms >= committed.expire_timestamp:
                    expired.append(tp)
                continue
            base = self.state_timestamp_ms if use_state_time and self.state_timestamp_ms >= 0 \
                else committed.commit_timestamp
            if now_ms - base >= retention_ms:
                expired.append(tp)
        return expired

