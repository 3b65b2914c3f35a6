"""WriteTxnMarkers (27): COMMIT/ABORT markers written on request. Kafka's coordinators send it to
partition leaders; on one node grete's coordinator writes its markers directly, so here it serves
``kafka-transactions.sh abort`` (Admin.abortTransaction), which ends a hanging transaction.

v2 (KIP-1228) adds a transaction version per marker for transaction version 2: not offered."""

from __future__ import annotations

from grete.broker.authz import Op, cluster_allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.topics import OFFSETS_TOPIC

Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


@api(27, 0, 1)
def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    results = []
    for marker in request.markers:
        topics = [TopicResult(name=topic.name, partitions=[
            PartitionResult(partition_index=index, error_code=_write(ctx, marker, topic.name, index))
            for index in topic.partition_indexes]) for topic in marker.topics]
        results.append(Result(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


def _write(ctx: RequestContext, marker: WriteTxnMarkersRequest.WritableTxnMarker, topic: str, index: int) -> int:
    broker = ctx.broker
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    partition = broker.partitions.get((topic, index))
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    now = broker.now_ms()
    batch = build_end_txn_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                 marker.coordinator_epoch, now)
    try:
        partition.append(RecordBatch(batch), now)
    except KafkaError as exc:
        return exc.code
    if topic == OFFSETS_TOPIC:
        broker.group_coordinator.complete_txn(index, marker.producer_id, marker.transaction_result)
    return ErrorCode.NONE
