"""DescribeTopicPartitions (75): v0, topics' partitions a page at a time (KIP-966).

Kafka 4's admin client describes topics with it. Topics are answered in name order, each once;
an empty topic list means every topic the principal may describe. ``response_partition_limit``
(at least 1, at most ``max.request.partition.size.limit``) bounds the partitions in one answer:
when it runs out mid-topic, or with topics left, ``next_cursor`` names where the next request
resumes. Topics that do not exist or have illegal names take no room in a page. The details, each
measured on Kafka 4.3.1:

* a cursor must name one of the requested topics, else every topic is INVALID_REQUEST;
* topics before the cursor's are skipped, and its partitions before the cursor's index;
* an empty topic name fails the whole request (Kafka's handler throws: UNKNOWN_SERVER_ERROR for
  every topic, in request order);
* the eligible-leader-replica lists are empty (grete has no ELR elections; Kafka with ELR on and
  nothing ineligible answers the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from grete.broker.authorizer import TOPIC_OPERATIONS as TOPIC_OPS
from grete.broker.authz import Op, Res, allowed, operations
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.coordinator.metadata import TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from grete.protocol.topics import validate_topic_name

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor
NOT_AUTHORIZED_OPERATIONS = -2147483648


@dataclass(slots=True)
class _Page:
    room: int
    topics: list[Topic]
    next_cursor: Cursor | None = None


@api(75, 0, 0)
def handle(ctx: RequestContext, request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    requested = [t.name for t in request.topics]
    if any(not name for name in requested):
        return DescribeTopicPartitionsResponse(topics=[_failed(name, ErrorCode.UNKNOWN_SERVER_ERROR)
                                                       for name in requested])
    cursor = request.cursor
    names = sorted(set(requested)) if requested else _all_topics(ctx)
    if cursor is not None:
        if requested and cursor.topic_name not in names:
            return DescribeTopicPartitionsResponse(topics=[_failed(n, ErrorCode.INVALID_REQUEST) for n in names])
        names = [n for n in names if n >= cursor.topic_name]
    limit = ctx.broker.config.get_int("max.request.partition.size.limit")
    page = _Page(room=max(1, min(request.response_partition_limit, limit)), topics=[])
    for name in names:
        if page.room <= 0:
            page.next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if _add_topic(ctx, page, name, first):
            break
    return DescribeTopicPartitionsResponse(topics=page.topics, next_cursor=page.next_cursor)


def _all_topics(ctx: RequestContext) -> list[str]:
    """Every topic, internal ones too; those the principal may not describe are left out silently."""
    secured = ctx.broker.authorizer is not None
    return sorted(name for name in ctx.broker.metadata.topics()
                  if not secured or allowed(ctx, Op.DESCRIBE, Res.TOPIC, name))


def _add_topic(ctx: RequestContext, page: _Page, name: str, first: int) -> bool:
    """Append ``name`` from partition ``first`` on; True when the page filled up inside it."""
    try:
        validate_topic_name(name)
    except KafkaError:
        page.topics.append(_failed(name, ErrorCode.INVALID_TOPIC_EXCEPTION, _operations(ctx, name)))
        return False
    if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, name):
        page.topics.append(_failed(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        return False
    meta = ctx.broker.metadata.topic(name)
    if meta is None:
        page.topics.append(_failed(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _operations(ctx, name)))
        return False
    indexes = [i for i in sorted(meta.partitions) if i >= first]
    taken = indexes[:page.room]
    page.room -= len(taken)
    page.topics.append(Topic(error_code=0, name=name, topic_id=meta.topic_id, is_internal=meta.internal,
                             partitions=[_partition(ctx, meta, i) for i in taken],
                             topic_authorized_operations=_operations(ctx, name)))
    if len(taken) < len(indexes):
        page.next_cursor = Cursor(topic_name=name, partition_index=indexes[len(taken)])
        return True
    return False


def _partition(ctx: RequestContext, meta: TopicMeta, index: int) -> Partition:
    """As Metadata describes it: a cluster broker from its metadata cache (a leader that is not live,
    or lacks this listener, is none); the single node from its replica (offline when its dir failed)."""
    broker = ctx.broker
    pmeta = meta.partitions[index]
    error, leader, epoch = ErrorCode.NONE, pmeta.leader, pmeta.leader_epoch
    isr, offline = list(pmeta.isr), list(pmeta.offline_replicas)
    if broker.cluster is not None:
        live = {b.id: b for b in broker.live_brokers()}
        info = live.get(pmeta.leader)
        if info is None or info.endpoint(ctx.listener) is None:
            error, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
    else:
        partition = broker.replicas.partitions.get((meta.name, index))
        if partition is not None:
            epoch = partition.leader_epoch
        if broker.replicas.is_offline(meta.name, index):
            error, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
            isr, offline = [r for r in isr if r != broker.node_id], [broker.node_id]
        elif partition is None or not partition.online:
            error = ErrorCode.LEADER_NOT_AVAILABLE
    return Partition(error_code=error, partition_index=index, leader_id=leader, leader_epoch=epoch,
                     replica_nodes=list(pmeta.replicas), isr_nodes=isr, eligible_leader_replicas=[],
                     last_known_elr=[], offline_replicas=offline)


def _operations(ctx: RequestContext, name: str) -> int:
    return operations(ctx, Res.TOPIC, name, TOPIC_OPS)


def _failed(name: str, error: int, authorized_operations: int = NOT_AUTHORIZED_OPERATIONS) -> Topic:
    return Topic(error_code=error, name=name, partitions=[], topic_authorized_operations=authorized_operations)
