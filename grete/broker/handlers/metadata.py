"""Metadata (3): brokers, controller, topics with their partitions, leader epochs and topic ids.

Topics are auto-created (auto.create.topics.enable and, from v4, the request's flag) synchronously,
so the first response already carries the new topic instead of LEADER_NOT_AVAILABLE.
"""

from __future__ import annotations

import uuid

from grete.broker.broker import INTERNAL_TOPICS
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.coordinator.metadata import TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import MetadataRequest, MetadataResponse

ZERO_UUID = uuid.UUID(int=0)
# READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: no authorizer.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))
OPERATIONS_NOT_REQUESTED = -2147483648


@api(3, 0, 12)
def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    listener = next((a for a in broker.advertised if a.name == ctx.listener), broker.advertised[0])
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=broker.node_id, host=listener.host,
                                                        port=listener.port, rack=None)],
        cluster_id=broker.metadata.cluster_id,
        controller_id=broker.node_id,
        topics=[],
    )
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = CLUSTER_OPERATIONS
    with_ops = request.include_topic_authorized_operations
    if request.topics is None or (ctx.version == 0 and not request.topics):
        for meta in sorted(broker.metadata.topics().values(), key=lambda m: m.name):
            response.topics.append(_describe(ctx, meta, with_ops))
        return response
    auto_create = broker.config.bool("auto.create.topics.enable") and (
        ctx.version < 4 or request.allow_auto_topic_creation)
    for wanted in request.topics:
        response.topics.append(_lookup(ctx, wanted, auto_create, with_ops))
    return response


def _lookup(ctx: RequestContext, wanted: MetadataRequest.MetadataRequestTopic, auto_create: bool,
            with_ops: bool) -> MetadataResponse.MetadataResponseTopic:
    broker = ctx.broker
    if wanted.name is None:
        meta = broker.metadata.topic_by_id(wanted.topic_id)
        if meta is None:
            return MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
        return _describe(ctx, meta, with_ops)
    meta = broker.metadata.topic(wanted.name)
    if meta is None:
        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if auto_create and wanted.name not in INTERNAL_TOPICS:
            try:
                meta = broker.create_topic(wanted.name)
            except KafkaError as exc:
                error = exc.code
        if meta is None:
            return MetadataResponse.MetadataResponseTopic(error_code=error, name=wanted.name,
                                                          topic_id=ZERO_UUID)
    return _describe(ctx, meta, with_ops)


def _describe(ctx: RequestContext, meta: TopicMeta, with_ops: bool) -> MetadataResponse.MetadataResponseTopic:
    partitions = []
    for index, pmeta in sorted(meta.partitions.items()):
        partition = ctx.broker.partitions.get((meta.name, index))
        epoch = partition.leader_epoch if partition is not None else pmeta.leader_epoch
        partitions.append(MetadataResponse.MetadataResponsePartition(
            error_code=0 if partition is not None and partition.online
            else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=index, leader_id=pmeta.leader, leader_epoch=epoch,
            replica_nodes=list(pmeta.replicas), isr_nodes=list(pmeta.isr), offline_replicas=[]))
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=meta.name, topic_id=meta.topic_id, is_internal=meta.internal,
        partitions=partitions,
        topic_authorized_operations=TOPIC_OPERATIONS if with_ops else OPERATIONS_NOT_REQUESTED)
