"""DeleteRecords (21): v0-2, raise a partition's log start offset (Admin deleteRecords).

Offset -1 means the high watermark. Past the high watermark, or negative otherwise, is
OFFSET_OUT_OF_RANGE; a compact-only topic refuses with POLICY_VIOLATION and an internal topic with
INVALID_TOPIC_EXCEPTION, as Kafka does. The answer's low watermark is the new log start offset.
Long-poll fetches parked on the partition are woken: their position may now be out of range.
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DeleteRecordsRequest, DeleteRecordsResponse
from grete.protocol.topics import INTERNAL_TOPICS

HIGH_WATERMARK = -1
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


@api(ApiKey.DELETE_RECORDS, 0, 2)
def handle(ctx: RequestContext[DataPlane], request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for topic in request.topics:
        partitions = [_delete(ctx, topic.name, p.partition_index, p.offset) for p in topic.partitions]
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    return DeleteRecordsResponse(topics=topics)


def _delete(ctx: RequestContext[DataPlane], topic: str, index: int, offset: int) -> PartitionResult:
    try:
        if not allowed(ctx, Op.DELETE, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        low_watermark = delete_before(ctx, topic, index, offset)
    except KafkaError as exc:
        return PartitionResult(partition_index=index, low_watermark=-1, error_code=exc.code)
    return PartitionResult(partition_index=index, low_watermark=low_watermark, error_code=0)


def delete_before(ctx: RequestContext[DataPlane], topic: str, index: int, offset: int) -> int:
    """Delete every record of ``topic``-``index`` below ``offset``; returns the new log start offset."""
    if topic in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}")
    partition = ctx.broker.partition(topic, index)
    if not partition.config.delete:
        raise KafkaError(ErrorCode.POLICY_VIOLATION,
                         f"Records of partition {topic}-{index} can not be deleted due to the configured policy")
    target = partition.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"The offset {target} for partition {topic}-{index} is not valid")
    return partition.delete_records_before(target)
