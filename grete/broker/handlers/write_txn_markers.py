"""WriteTxnMarkers (27): COMMIT/ABORT markers written on request. Transaction coordinators send it to
the leaders of partitions they do not lead themselves (in a cluster); it also serves
``kafka-transactions.sh abort`` (Admin.abortTransaction), which ends a hanging transaction. Only a
leader writes a marker, and in a cluster it answers once the ISR has it, as Kafka appends markers
with acks=all.

v2 (KIP-1228) adds a transaction version per marker: a transaction version 2 marker carries the
epoch the coordinator bumped at the end of the transaction, so it must be above the producer's
epoch on the partition (INVALID_PRODUCER_EPOCH otherwise), and it leaves the verification guard of
the producer's next transaction in place."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from grete.broker.replica.appends import delayed_produce
from grete.broker.replica.partition import Partition
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.topics import OFFSETS_TOPIC

Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult
MARKER_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for the coordinator's marker requests


Replicating = tuple[PartitionResult, Partition, int]


@api(ApiKey.WRITE_TXN_MARKERS, 0, 2, advertised_min=1)
def handle(ctx: RequestContext[Transactions],
           request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse | Coroutine[Any, Any, WriteTxnMarkersResponse]:
    results = []
    replicating: list[Replicating] = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                answer = PartitionResult(partition_index=index, error_code=0)
                answer.error_code = _write(ctx, marker, topic.name, index, answer, replicating)
                partitions.append(answer)
            topics.append(TopicResult(name=topic.name, partitions=partitions))
        results.append(Result(producer_id=marker.producer_id, topics=topics))
    response = WriteTxnMarkersResponse(markers=results)
    if replicating:
        return _await_replication(response, replicating)
    return response


async def _await_replication(response: WriteTxnMarkersResponse,
                             replicating: list[Replicating]) -> WriteTxnMarkersResponse:
    outcomes = await delayed_produce([(p, offset) for _, p, offset in replicating], MARKER_TIMEOUT_MS)
    for (answer, _, _), outcome in zip(replicating, outcomes, strict=True):
        answer.error_code = outcome
    return response


def _write(ctx: RequestContext[Transactions], marker: WriteTxnMarkersRequest.WritableTxnMarker, topic: str, index: int,
           answer: PartitionResult, replicating: list[Replicating]) -> int:
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
        result = partition.append(RecordBatch(batch), now, transaction_version=marker.transaction_version)
    except KafkaError as exc:
        return exc.code
    if topic == OFFSETS_TOPIC:
        broker.group_coordinator.complete_txn(index, marker.producer_id, marker.transaction_result)
    if partition.has_followers:
        replicating.append((answer, partition, result.last_offset + 1))
    return ErrorCode.NONE
