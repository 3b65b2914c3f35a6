"""Metadata (3): brokers, controller, topics with their partitions, leader epochs and topic ids.

v13 adds a top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED), which a broker answering for
itself leaves at NONE, as Kafka's does.

Topics are auto-created (auto.create.topics.enable and, from v4, the request's flag) before the
answer, which still reports them as not there yet, with the code Kafka gives (the next Metadata
finds them). So is a topic this broker has not learned of yet that already exists (created through
another broker, or by this one for another client, its UpdateMetadata still on the way) and one
whose leaders were not elected in time: Kafka's AutoTopicCreationManager turns TOPIC_ALREADY_EXISTS
and REQUEST_TIMED_OUT into LEADER_NOT_AVAILABLE, which clients retry (TOPIC_ALREADY_EXISTS is fatal
to them).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authorizer import CLUSTER_OPERATIONS as CLUSTER_OPS
from grete.broker.security.authorizer import TOPIC_OPERATIONS as TOPIC_OPS
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed, operations
from grete.coordinator.metadata import TopicMeta
from grete.protocol.acls import CLUSTER_NAME
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, MetadataRequest, MetadataResponse
from grete.protocol.topics import INTERNAL_TOPICS

# CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE: the seven
# operations Kafka reports on the cluster resource (WRITE is not one of them).
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
OPERATIONS_NOT_REQUESTED = -2147483648
# What a topic being auto-created can meet that only means "not there yet" (see the module doc).
NOT_THERE_YET = (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.REQUEST_TIMED_OUT)


@api(ApiKey.METADATA, 0, 13)
def handle(ctx: RequestContext[Admin],
           request: MetadataRequest) -> MetadataResponse | Coroutine[Any, Any, MetadataResponse]:
    broker = ctx.broker
    response = MetadataResponse(brokers=_brokers(ctx), cluster_id=broker.metadata.cluster_id,
                                controller_id=broker.controller_id(), topics=[])
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = (operations(ctx, Res.CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
                                                  if cluster_allowed(ctx, Op.DESCRIBE) else 0)
    with_ops = request.include_topic_authorized_operations
    secured = broker.authorizer is not None
    if request.topics is None or (ctx.version == 0 and not request.topics):
        for meta in sorted(broker.metadata.topics().values(), key=lambda m: m.name):
            # Topics the principal may not describe are left out silently (their existence is secret).
            if not secured or allowed(ctx, Op.DESCRIBE, Res.TOPIC, meta.name):
                response.topics.append(_describe(ctx, meta, with_ops))
        return response
    auto_create = broker.config.get_bool("auto.create.topics.enable") and (
        ctx.version < 4 or request.allow_auto_topic_creation)
    missing = [w.name for w in request.topics
               if w.name is not None and w.name not in INTERNAL_TOPICS and broker.metadata.topic(w.name) is None
               and (not secured or allowed(ctx, Op.DESCRIBE, Res.TOPIC, w.name))]
    refused: dict[str, int] = {}
    if secured and auto_create and missing and not cluster_allowed(ctx, Op.CREATE):
        # No CREATE on the cluster: per topic; a topic that cannot be created is TOPIC_AUTHORIZATION_FAILED.
        refused = {name: ErrorCode.TOPIC_AUTHORIZATION_FAILED for name in missing
                   if not allowed(ctx, Op.CREATE, Res.TOPIC, name)}
        missing = [name for name in missing if name not in refused]
    if auto_create and missing:
        return _create_then_answer(ctx, request, response, missing, with_ops, refused)
    for wanted in request.topics:
        response.topics.append(_lookup(ctx, wanted, with_ops, refused))
    return response


async def _create_then_answer(ctx: RequestContext[Admin], request: MetadataRequest, response: MetadataResponse,
                              missing: list[str], with_ops: bool, refused: dict[str, int]) -> MetadataResponse:
    failed: dict[str, int] = dict(refused)
    # Kafka answers a topic its Metadata call auto-creates as not there yet (KRaft:
    # UNKNOWN_TOPIC_OR_PARTITION; ZooKeeper mode: LEADER_NOT_AVAILABLE); clients ask again.
    cluster = ctx.broker.cluster
    created = cluster.auto_create_error
    for name in dict.fromkeys(missing):
        try:
            await ctx.broker.create_topic(name, wait_open=cluster.auto_create_waits_open, elected=False)
            failed[name] = created
        except KafkaError as exc:
            failed[name] = created if exc.code in NOT_THERE_YET else exc.code
    for wanted in request.topics or []:
        response.topics.append(_lookup(ctx, wanted, with_ops, failed))
    return response


def _lookup(ctx: RequestContext[Admin], wanted: MetadataRequest.MetadataRequestTopic, with_ops: bool,
            failed: dict[str, int]) -> MetadataResponse.MetadataResponseTopic:
    broker = ctx.broker
    if broker.authorizer is not None:
        name = wanted.name
        if name is None:
            by_id = broker.metadata.topic_by_id(wanted.topic_id)
            name = by_id.name if by_id is not None else None
        if name is not None and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, name):
            # Refused before the existence check; a topic id is echoed (ids are not secret), a name too.
            return MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name, is_internal=False,
                topic_id=wanted.topic_id if wanted.name is None else ZERO_UUID, partitions=[])
    if wanted.name is None:
        meta = broker.metadata.topic_by_id(wanted.topic_id)
        if meta is None:
            return MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
        return _describe(ctx, meta, with_ops)
    meta = broker.metadata.topic(wanted.name)
    if meta is None or wanted.name in failed:  # missing, refused, or created by this very call
        error = failed.get(wanted.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        # Kafka fills the operations of every topic it may describe, found or not; not of one it refused.
        ops = (operations(ctx, Res.TOPIC, wanted.name, TOPIC_OPS)
               if with_ops and error != ErrorCode.TOPIC_AUTHORIZATION_FAILED else OPERATIONS_NOT_REQUESTED)
        return MetadataResponse.MetadataResponseTopic(error_code=error, name=wanted.name, topic_id=ZERO_UUID,
                                                      topic_authorized_operations=ops)
    return _describe(ctx, meta, with_ops)


def _brokers(ctx: RequestContext[Admin]) -> list[MetadataResponse.MetadataResponseBroker]:
    """Every live broker with an endpoint on the listener the request came in on (Kafka lists only
    those); on the embedded node, this node at the address advertised for that listener."""
    return [MetadataResponse.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in ctx.broker.cluster.listed_brokers(ctx.listener)]


def _describe(ctx: RequestContext[Admin], meta: TopicMeta, with_ops: bool) -> MetadataResponse.MetadataResponseTopic:
    """A cluster broker answers from its metadata cache (Kafka's ZkMetadataCache): a leader that is
    not live, or has no endpoint on this listener, is reported as none (LEADER_NOT_AVAILABLE;
    LISTENER_NOT_FOUND from v6 when the leader lives but lacks the listener). The embedded node
    answers from its replicas: one whose log dir failed has no leader and is offline."""
    indexes = sorted(meta.partitions)
    states = ctx.broker.cluster.partition_states(meta, indexes, ctx.listener, listener_not_found=ctx.version >= 6)
    partitions = [MetadataResponse.MetadataResponsePartition(
        error_code=state.error, partition_index=index, leader_id=state.leader, leader_epoch=state.leader_epoch,
        replica_nodes=list(meta.partitions[index].replicas), isr_nodes=state.isr, offline_replicas=state.offline)
        for index, state in zip(indexes, states, strict=True)]
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=meta.name, topic_id=meta.topic_id, is_internal=meta.internal,
        partitions=partitions,
        topic_authorized_operations=(operations(ctx, Res.TOPIC, meta.name, TOPIC_OPS) if with_ops
                                     else OPERATIONS_NOT_REQUESTED))
