"""StreamsGroupHeartbeat's inputs and answer as the coordinator sees them (no wire codec), and the
request checks Kafka 4.3.1 makes before touching a group (GroupMetadataManager's
throwIfStreamsGroupHeartbeatRequestIsInvalid), with its messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from grete.coordinator.groups.modern_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    GroupRequestError,
    check_identity,
    invalid_request,
)
from grete.coordinator.groups.streams_state import Tasks
from grete.coordinator.groups.streams_topology import TopicInfo, Topology
from grete.protocol.errors import ErrorCode

# What Kafka 4.3.1 answers for the lag a warm-up task may have and how often members report task
# offsets: 0 and 0 (measured; it offers no warm-up tasks either).
ACCEPTABLE_RECOVERY_LAG = 0
TASK_OFFSET_INTERVAL_MS = 0


@dataclass(frozen=True)
class StreamsHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: Tasks | None = None
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


# An endpoint of interactive queries and the partitions its member's active and standby tasks hold.
EndpointPartitions = tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]


@dataclass
class StreamsResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    statuses: list[tuple[int, str]] | None = None
    active_tasks: Tasks | None = None  # None: unchanged since the member's last heartbeat
    standby_tasks: Tasks | None = None
    endpoint_epoch: int = 0
    endpoints: list[EndpointPartitions] | None = None
    # Internal topics the broker should create (Kafka's auto-topic creation for streams groups).
    to_create: tuple[TopicInfo, ...] = field(default_factory=tuple)


def validate(req: StreamsHeartbeat) -> None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid, with its messages."""
    check_identity(req.group_id, req.instance_id, req.rack_id)
    if not req.member_id:
        raise invalid_request("MemberId can't be empty.")
    epoch = req.member_epoch
    if epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
        if req.active_tasks is None or req.active_tasks:
            raise invalid_request("ActiveTasks must be empty when (re-)joining.")
        if req.standby_tasks is None or req.standby_tasks:
            raise invalid_request("StandbyTasks must be empty when (re-)joining.")
        if req.warmup_tasks is None or req.warmup_tasks:
            raise invalid_request("WarmupTasks must be empty when (re-)joining.")
        if req.topology is None:
            raise invalid_request("Topology must be non-null when (re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise invalid_request("InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise invalid_request(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    elif epoch != LEAVE_EPOCH and req.topology is not None:
        raise invalid_request("Topology can only be provided when (re-)joining.")
    if req.topology is not None:
        _validate_topology(req.topology)


def _validate_topology(topology: Topology) -> None:
    """Kafka 4.3.1's checks of a topology, with its codes and messages (measured)."""
    sinks = {t for sub in topology.subtopologies for t in sub.repartition_sink_topics}
    for sub in topology.subtopologies:
        if sub.source_topic_regex:
            raise GroupRequestError(ErrorCode.INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")
    for sub in topology.subtopologies:
        if not sub.source_topics and not sub.repartition_source_topics:
            raise GroupRequestError(ErrorCode.STREAMS_INVALID_TOPOLOGY,
                               f"No source topics found for subtopology {sub.subtopology_id}")
        if any(t.partitions <= 0 and t.name not in sinks for t in sub.repartition_source_topics):
            raise GroupRequestError(ErrorCode.STREAMS_INVALID_TOPOLOGY,
                               "Failed to compute number of partitions for all repartition topics, because a "
                               "repartition source topic is never used as a sink topic.")
