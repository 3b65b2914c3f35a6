"""OffsetForLeaderEpoch (23): the end offset of a leader epoch, from the leader-epoch cache.

librdkafka sends exactly v2; Java validates positions only when v3+ is advertised (KIP-320)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, advertised_min=2)
def handle(ctx: RequestContext[DataPlane], request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    # A follower's request needs CLUSTER_ACTION; a client's, DESCRIBE on each topic.
    cluster_action = ctx.broker.authorizer is None or cluster_allowed(ctx, Op.CLUSTER_ACTION)
    for topic in request.topics:
        results = []
        for wanted in topic.partitions:
            try:
                if not cluster_action and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic.topic):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = ctx.broker.partition(topic.topic, wanted.partition)
                partition.check_leader_epoch(wanted.current_leader_epoch)
                epoch, end_offset = partition.end_offset_for_epoch(wanted.leader_epoch)
                results.append(EpochEndOffset(error_code=0, partition=wanted.partition, leader_epoch=epoch,
                                              end_offset=end_offset))
            except KafkaError as exc:
                results.append(EpochEndOffset(error_code=exc.code, partition=wanted.partition,
                                              leader_epoch=-1, end_offset=-1))
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic,
                                                                             partitions=results))
    return OffsetForLeaderEpochResponse(topics=topics)
