"""ListOffsets (2): earliest (-2), latest (-1, HW or LSO by isolation), max timestamp (-3, v7+),
earliest local (-4, v8+), latest tiered (-5, v9+), earliest pending upload (-6, v11+), and the first
offset at or after a timestamp (time index). No match answers offset -1, timestamp -1.

Without tiered storage (KIP-405) the local log is the whole log, as Kafka answers then: -4 is the
earliest offset, and -5 / -6 find nothing. A special timestamp older than the request's version
answers UNSUPPORTED_VERSION for its partition, as Kafka does. v10's TimeoutMs bounds a remote
lookup (KIP-1075); there is none here.

v0, which a broker of a ZooKeeper cluster serves as Kafka 3.9's does (Kafka 4 removed it, KIP-896),
answers up to MaxNumOffsets offsets: the segments' base offsets written at or before the timestamp
and the log end, highest first (Kafka's legacyFetchOffsetsBefore; a consumer's capped at the high
watermark)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ListOffsetsRequest, ListOffsetsResponse

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
# The first version that may ask for each special timestamp.
SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse


@api(ApiKey.LIST_OFFSETS, 0, 11, advertised_min=1)
def handle(ctx: RequestContext[DataPlane], request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        seen: set[int] = set()
        partitions = []
        for wanted in topic.partitions:
            if wanted.partition_index in seen:
                partitions.append(PartitionResponse(partition_index=wanted.partition_index,
                                                    error_code=ErrorCode.INVALID_REQUEST))
                continue
            seen.add(wanted.partition_index)
            if ctx.version == 0:
                partitions.append(_legacy_lookup(ctx, topic.name, wanted, request.replica_id))
                continue
            partitions.append(_lookup(ctx, topic.name, wanted, request.isolation_level, request.replica_id))
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(topics=topics)


def _legacy_lookup(ctx: RequestContext[DataPlane], topic: str, wanted: ListOffsetsRequest.ListOffsetsPartition,
                   replica_id: int) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    index = wanted.partition_index
    try:
        if ctx.broker.authorizer is not None and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        partition = ctx.broker.partition(topic, index)
        # A consumer (-1) sees none past the high watermark; a debugging replica (-2) does.
        offsets = partition.legacy_offsets_before(wanted.timestamp, wanted.max_num_offsets, ctx.broker.now_ms(),
                                                  consumer=replica_id == -1)
    except KafkaError as exc:
        return PartitionResponse(partition_index=index, error_code=exc.code, old_style_offsets=[])
    return PartitionResponse(partition_index=index, old_style_offsets=offsets)


def _lookup(ctx: RequestContext[DataPlane], topic: str, wanted: ListOffsetsRequest.ListOffsetsPartition,
            isolation_level: int, replica_id: int = -1) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    index = wanted.partition_index
    try:
        if ctx.broker.authorizer is not None and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if wanted.timestamp < 0 and ctx.version < SINCE.get(wanted.timestamp, 1 << 15):
            # Before the partition is looked up, as Kafka's isListOffsetsTimestampUnsupported.
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {wanted.timestamp} is not supported "
                             f"at ListOffsets v{ctx.version}")
        partition = ctx.broker.partition(topic, index)
        partition.check_leader_epoch(wanted.current_leader_epoch)
        # A follower (replica id >= 0) sees the whole log, as Kafka answers it; clients up to the
        # high watermark (or the last stable offset).
        fetchable = (partition.log_end_offset if replica_id >= 0
                     else partition.last_stable_offset if isolation_level == 1 else partition.high_watermark)
        if replica_id < 0 and ctx.version >= 2 and partition.high_watermark_pending:
            raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE)
        epoch = partition.leader_epoch if ctx.version >= 4 else -1  # LeaderEpoch is v4+ only
        if wanted.timestamp == LATEST:
            return PartitionResponse(partition_index=index, timestamp=-1, offset=fetchable, leader_epoch=epoch)
        if wanted.timestamp in (EARLIEST, EARLIEST_LOCAL):
            # The epoch of the earliest offset's batches, as Kafka answers, not the current one.
            return PartitionResponse(partition_index=index, timestamp=-1, offset=partition.log_start_offset,
                                     leader_epoch=partition.epoch_of_log_start() if ctx.version >= 4 else -1)
        if wanted.timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            return PartitionResponse(partition_index=index, timestamp=-1, offset=-1, leader_epoch=-1)
        found: tuple[int, int] | None
        if wanted.timestamp == MAX_TIMESTAMP:
            found = partition.offset_of_max_timestamp()
        else:
            found = partition.offset_for_timestamp(wanted.timestamp)
        if found is None or found[0] < 0 or found[0] >= fetchable:
            return PartitionResponse(partition_index=index, timestamp=-1, offset=-1, leader_epoch=-1)
        return PartitionResponse(partition_index=index, timestamp=found[1], offset=found[0],
                                 leader_epoch=epoch)
    except KafkaError as exc:
        return PartitionResponse(partition_index=index, error_code=exc.code, timestamp=-1, offset=-1)
