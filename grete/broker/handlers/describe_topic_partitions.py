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
* the eligible leader replicas and the last known ELR are the partition's as the KRaft metadata
  holds them (empty in ZooKeeper mode, as Kafka 3.9 has none).
"""

from __future__ import annotations

from dataclasses import dataclass

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authorizer import TOPIC_OPERATIONS as TOPIC_OPS
from grete.broker.security.authz import Op, Res, allowed, operations
from grete.coordinator.metadata import TopicMeta
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
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


@api(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
def handle(ctx: RequestContext[Admin], request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
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


def _all_topics(ctx: RequestContext[Admin]) -> list[str]:
    """Every topic, internal ones too; those the principal may not describe are left out silently."""
    secured = ctx.broker.authorizer is not None
    return sorted(name for name in ctx.broker.metadata.topics()
                  if not secured or allowed(ctx, Op.DESCRIBE, Res.TOPIC, name))


def _add_topic(ctx: RequestContext[Admin], page: _Page, name: str, first: int) -> bool:
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
                             partitions=_partitions(ctx, meta, taken),
                             topic_authorized_operations=_operations(ctx, name)))
    if len(taken) < len(indexes):
        page.next_cursor = Cursor(topic_name=name, partition_index=indexes[len(taken)])
        return True
    return False


def _partitions(ctx: RequestContext[Admin], meta: TopicMeta, indexes: list[int]) -> list[Partition]:
    """As Metadata describes them (the cluster view's answer; a leader not reachable on this listener
    is none, LEADER_NOT_AVAILABLE)."""
    states = ctx.broker.cluster.partition_states(meta, indexes, ctx.listener, listener_not_found=False)
    return [Partition(error_code=state.error, partition_index=index, leader_id=state.leader,
                      leader_epoch=state.leader_epoch, replica_nodes=list(meta.partitions[index].replicas),
                      isr_nodes=state.isr, eligible_leader_replicas=list(meta.partitions[index].elr),
                      last_known_elr=list(meta.partitions[index].last_known_elr),
                      offline_replicas=state.offline)
            for index, state in zip(indexes, states, strict=True)]


def _operations(ctx: RequestContext[Admin], name: str) -> int:
    return operations(ctx, Res.TOPIC, name, TOPIC_OPS)


def _failed(name: str, error: int, authorized_operations: int = NOT_AUTHORIZED_OPERATIONS) -> Topic:
    return Topic(error_code=error, name=name, partitions=[], topic_authorized_operations=authorized_operations)
