"""DescribeProducers (61): the producers a partition's log knows (kafka-transactions.sh uses it to
find hanging transactions)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeProducersRequest, DescribeProducersResponse

Partition = DescribeProducersResponse.PartitionResponse


@api(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
def handle(ctx: RequestContext[DataPlane], request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            partition = ctx.broker.partitions.get((topic.name, index))
            if not allowed(ctx, Op.READ, Res.TOPIC, topic.name):
                partitions.append(Partition(partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                            active_producers=[]))
                continue
            if partition is None:
                partitions.append(Partition(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            active_producers=[]))
                continue
            producers = [DescribeProducersResponse.ProducerState(
                producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=e.current_txn_first_offset)
                for e in partition.producers()]
            partitions.append(Partition(partition_index=index, error_code=ErrorCode.NONE, active_producers=producers))
        topics.append(DescribeProducersResponse.TopicResponse(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(topics=topics)
