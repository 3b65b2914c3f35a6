"""Inputs and results of the group coordinator's API, free of any wire codec.

The broker's request handlers build these from decoded requests and turn the results into responses;
field names follow Kafka's request/response schemas where a client meets them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from grete.protocol.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"
STREAMS_GROUP_TYPE = "streams"


@dataclass(frozen=True)
class GroupConfig:
    """Broker settings for groups and offsets (Kafka's names, minus the dots)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000  # the embedded single-node broker passes 0
    group_max_size: int = 2**31 - 1
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    offset_metadata_max_bytes: int = 4096
    offsets_retention_check_interval_ms: int = 600000
    # Kafka times out a JoinGroup of a brand-new member after 5 minutes so that defunct members of
    # clients that gave up and retried do not pile up in a long rebalance.
    new_member_join_timeout_ms: int = 300000
    # KIP-848 consumer groups (group.consumer.*); per-group overrides come from the group's configs.
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_protocol_enabled: bool = True  # "consumer" in group.coordinator.rebalance.protocols
    consumer_migration_policy: str = "bidirectional"  # disabled, upgrade, downgrade, bidirectional
    # KIP-1071 streams groups (group.streams.*); per-group overrides come from the group's configs.
    streams_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_max_size: int = 2**31 - 1
    streams_initial_rebalance_delay_ms: int = 3000
    streams_num_standby_replicas: int = 0
    streams_protocol_enabled: bool = True  # "streams" in group.coordinator.rebalance.protocols

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


@dataclass(frozen=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = UNKNOWN_MEMBER_ID
    skip_assignment: bool = False
    members: list[JoinMember] = field(default_factory=list)

    @staticmethod
    def failed(member_id: str, error: ErrorCode) -> JoinResult:
        return JoinResult(error=error, member_id=member_id)


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""
    commit_timestamp: int = -1  # OffsetCommit v1's own timestamp (-1: the time it is stored)


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups for one group. An unknown group is ``error NONE, state "Dead"`` as Kafka 3.x
    answers; DescribeGroups v6+ handlers may turn ``found=False`` into GROUP_ID_NOT_FOUND."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: list[MemberDescription] = field(default_factory=list)
    found: bool = True
    not_found: str | None = None  # why, in Kafka's words, when ``found`` is False


class GroupListing(NamedTuple):
    """One ListGroups entry; a tuple ``(group_id, protocol_type, state, group_type)``."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE
