"""CreatePartitions (37): v0-3, grow a topic to ``count`` partitions (never shrink).

Checks and messages follow Kafka's controller; manual assignments must name only this node, one
list per added partition.
"""

from __future__ import annotations

from collections import Counter

from grete.broker.handlers.create_topics import check_replica_list, registered_broker_ids
from grete.broker.quotas.client_quotas import MutationQuota, throttle_for_mutations
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, CreatePartitionsRequest, CreatePartitionsResponse

Result = CreatePartitionsResponse.CreatePartitionsTopicResult
STRICT_QUOTA_SINCE = 3


@api(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle(ctx: RequestContext[Admin], request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    counts = Counter(topic.name for topic in request.topics)
    # KIP-599: v3+ clients know THROTTLING_QUOTA_EXCEEDED; older ones are throttled afterwards.
    quota = ctx.broker.quotas.mutations(ctx, strict=ctx.version >= STRICT_QUOTA_SINCE)
    results = []
    for topic in request.topics:
        if counts[topic.name] == 1:
            results.append(await _grow(ctx, topic, request.validate_only, quota))
    for name in dict.fromkeys(t.name for t in request.topics if counts[t.name] > 1):
        results.append(Result(name=name, error_code=ErrorCode.INVALID_REQUEST,
                              error_message="Duplicate topic name."))
    response = CreatePartitionsResponse(results=results)
    throttle_for_mutations(ctx, response, quota)
    return response


async def _grow(ctx: RequestContext[Admin], topic: CreatePartitionsRequest.CreatePartitionsTopic,
                validate_only: bool, quota: MutationQuota) -> Result:
    broker = ctx.broker
    try:
        if not allowed(ctx, Op.ALTER, Res.TOPIC, topic.name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        meta = broker.metadata.topic(topic.name)
        if meta is None:  # a KRaft controller's answer carries no message (Kafka 4.3.1's), 3.9's this one
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition." if broker.cluster.zk_broker_apis else None)
        current = len(meta.partitions)
        if topic.count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if topic.count < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} "
                             f"partition(s); {topic.count} would not be an increase.")
        if topic.assignments is not None:
            added = topic.count - current
            if len(topic.assignments) != added:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {added} additional "
                                 f"partition(s), but only {len(topic.assignments)} assignment(s) were specified.")
            meta = broker.metadata.topic(topic.name)
            replication = (len(next(iter(meta.partitions.values())).replicas)
                           if meta is not None and meta.partitions else None)
            for assignment in topic.assignments:
                check_replica_list(assignment.broker_ids, registered_broker_ids(broker), replication)
        if not validate_only:
            quota.record(topic.count - current)
        await broker.add_partitions(topic.name, topic.count, validate_only=validate_only,
                                    assignment=[list(a.broker_ids) for a in topic.assignments or []] or None)
    except KafkaError as exc:
        return Result(name=topic.name, error_code=exc.code, error_message=exc.message)
    return Result(name=topic.name, error_code=0, error_message=None)
