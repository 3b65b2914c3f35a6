"""CreateTopics (19): v2-7, with the checks and messages of Kafka's KRaft controller.

-1 partitions / replication factor mean the broker defaults (``num.partitions``,
``default.replication.factor``), which kafka-topics.sh sends. v5+ answers the new topic's
partition count, replication factor and every config with its source; v7 its topic id.
Manual replica assignments name live brokers (only this node on the embedded single node).
"""

from __future__ import annotations

from collections import Counter

from grete.broker.config import ConfigError, validate_topic_configs
from grete.broker.handlers.describe_configs import topic_config_entries
from grete.broker.quotas.client_quotas import MutationQuota, throttle_for_mutations
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.coordinator.metadata import TopicMeta
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, CreateTopicsRequest, CreateTopicsResponse
from grete.protocol.topics import validate_topic_name

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
Result = CreateTopicsResponse.CreatableTopicResult
STRICT_QUOTA_SINCE = 6


@api(ApiKey.CREATE_TOPICS, 0, 7, advertised_min=2)
async def handle(ctx: RequestContext[Admin], request: CreateTopicsRequest) -> CreateTopicsResponse:
    counts = Counter(topic.name for topic in request.topics)
    created: list[TopicMeta] = []
    # KIP-599: v6+ clients know THROTTLING_QUOTA_EXCEEDED; older ones are throttled afterwards.
    quota = ctx.broker.quotas.mutations(ctx, strict=ctx.version >= STRICT_QUOTA_SINCE)
    results = [await _create(ctx, topic, request.validate_only, created, quota)
               for topic in request.topics if counts[topic.name] == 1]
    # Kafka answers each duplicated name once, after the others, and creates none of them.
    for name in dict.fromkeys(t.name for t in request.topics if counts[t.name] > 1):
        results.append(_error(name, KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")))
    # Answer once every new partition accepts writes (the replica manager opens large topics a chunk
    # per loop step, serving other connections meanwhile).
    for meta in created:
        await ctx.broker.replicas.ready(meta)
    response = CreateTopicsResponse(topics=results)
    throttle_for_mutations(ctx, response, quota)
    return response


async def _create(ctx: RequestContext[Admin], topic: CreateTopicsRequest.CreatableTopic, validate_only: bool,
                  created: list[TopicMeta], quota: MutationQuota) -> Result:
    broker = ctx.broker
    try:
        if broker.authorizer is not None and not cluster_allowed(ctx, Op.CREATE) \
                and not allowed(ctx, Op.CREATE, Res.TOPIC, topic.name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if topic.name == CLUSTER_METADATA_TOPIC:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        validate_topic_name(topic.name)
        _check_collision(broker, topic.name)
        if broker.metadata.topic(topic.name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
        configs = _configs(topic, broker.config.zookeeper_mode)
        manual = _manual_assignment(broker, topic) if topic.assignments else None
        partitions, replication = _sizes(broker, topic) if manual is None else (len(manual), len(manual[0]))
        if not validate_only:
            quota.record(_resolved(broker, partitions))
        meta = await broker.create_topic(topic.name, partitions, replication, configs,
                                         validate_only=validate_only, wait_open=False, assignment=manual)
    except KafkaError as exc:
        return _error(topic.name, exc)
    if meta is not None:
        created.append(meta)
    result = Result(name=topic.name, topic_id=meta.topic_id if meta is not None else ZERO_UUID,
                    error_code=0, error_message=None, topic_config_error_code=0)
    if ctx.version >= 5 and broker.authorizer is not None \
            and not allowed(ctx, Op.DESCRIBE_CONFIGS, Res.TOPIC, topic.name):
        # Created, but the sizes and configs are DESCRIBE_CONFIGS on the topic (Kafka's
        # ControllerApis.createTopics; measured on 4.3.1 and 3.9.2 by compat-tests/security).
        result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        result.num_partitions, result.replication_factor, result.configs = -1, -1, []
    elif ctx.version >= 5:
        result.num_partitions = len(meta.partitions) if meta is not None else _resolved(broker, partitions)
        result.replication_factor = (len(next(iter(meta.partitions.values())).replicas)
                                     if meta is not None and meta.partitions
                                     else broker.config.get_int("default.replication.factor") if replication == -1
                                     else replication)
        result.configs = [CreateTopicsResponse.CreatableTopicConfigs(
            name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
            is_sensitive=e.sensitive) for e in topic_config_entries(broker.config, configs)]
    return result


def _error(name: str, exc: KafkaError) -> Result:
    return Result(name=name, topic_id=ZERO_UUID, error_code=exc.code, error_message=exc.message,
                  num_partitions=-1, replication_factor=-1, configs=[])


def _check_collision(broker: Admin, name: str) -> None:
    """'.' and '_' collide in metric names, so Kafka refuses a topic that differs only by them."""
    if "." not in name and "_" not in name:
        return
    unified = name.replace(".", "_")
    for existing in broker.metadata.topics():
        if existing != name and existing.replace(".", "_") == unified:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {existing}")


def _configs(topic: CreateTopicsRequest.CreatableTopic, zookeeper_mode: bool) -> dict[str, str]:
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
    try:
        return validate_topic_configs({c.name: c.value for c in topic.configs}, zookeeper_mode=zookeeper_mode)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _sizes(broker: Admin, topic: CreateTopicsRequest.CreatableTopic) -> tuple[int, int]:
    """(partitions, replication factor) to create, -1 meaning the broker default."""
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         "Number of partitions was set to an invalid non-positive value.")
    return topic.num_partitions, topic.replication_factor


def _resolved(broker: Admin, partitions: int) -> int:
    return broker.config.get_int("num.partitions") if partitions == -1 else partitions


def _manual_assignment(broker: Admin, topic: CreateTopicsRequest.CreatableTopic) -> dict[int, list[int]]:
    if topic.replication_factor != -1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                         "but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                         "but numPartitions was not set to -1.")
    seen: set[int] = set()
    replication: int | None = None
    # A ZooKeeper cluster takes replicas on brokers it does not know (Kafka 3.9's ZkAdminManager does
    # not check them, as its TopicCommand never did); a KRaft cluster refuses them.
    known = None if broker.config.zookeeper_mode else registered_broker_ids(broker)
    for assignment in topic.assignments:
        if assignment.partition_index in seen:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition "
                             f"assignments for partition {assignment.partition_index}")
        seen.add(assignment.partition_index)
        check_replica_list(assignment.broker_ids, known, replication)
        replication = len(assignment.broker_ids)
    if seen != set(range(len(seen))):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence")
    return {a.partition_index: list(a.broker_ids) for a in topic.assignments}


def registered_broker_ids(broker: Admin) -> set[int]:
    return {b.id for b in broker.registered_brokers()}


def check_replica_list(broker_ids: list[int], registered: set[int] | None, replication: int | None) -> None:
    """Kafka's validateManualPartitionAssignment against the registered brokers (a KRaft cluster's
    fenced ones included; the controller leaves them out of the new partitions' ISR); None: any."""
    if not broker_ids:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(broker_ids):
        if registered is not None and broker_id not in registered:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                             f"includes broker {broker_id}, but no such broker is registered.")
        if broker_id == previous:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                             f"includes the broker {broker_id} more than once.")
        previous = broker_id
    if replication is not None and len(broker_ids) != replication:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                         f"a partition with {len(broker_ids)} replica(s), but this is not consistent with "
                         f"previous partitions, which have {replication} replica(s).")
