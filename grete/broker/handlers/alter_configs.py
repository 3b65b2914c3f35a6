"""AlterConfigs (33): v0-2, the legacy form that replaces a resource's whole override set.

Topic resources: the request's configs become the topic's overrides (keys left out go back to
their defaults) and apply live to every partition's log. Broker resources: the configs become this
broker's (or, with an empty name, the cluster default's) dynamic set, checked as Kafka 4.3 checks
it (grete/broker/config.py ``check_dynamic_update``): static keys are INVALID_REQUEST "Cannot update
these configs dynamically: [...]"; on the single node min.insync.replicas follows KRaft's ELR rules.
Client-metrics resources (KIP-714): the configs become the subscription's whole set
(grete/broker/metrics/client_metrics_configs.py). Group resources (Kafka 4): the configs become the group's
whole override set (grete/broker/groups/group_configs.py), as Kafka 4.3's controller takes them from this
legacy request too; in a ZooKeeper cluster they are kept under ``/config/groups``.

The checks shared with IncrementalAlterConfigs live here, in Kafka's order: a resource named twice,
duplicate keys, null values, then the resource name, the new configs, and the topic's existence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from grete.broker.config import ConfigError, check_dynamic_update, validate_topic_configs
from grete.broker.groups.group_configs import validate_group_configs
from grete.broker.handlers.describe_configs import BROKER, GROUP, TOPIC, authorize_config_resource
from grete.broker.metrics.client_metrics_configs import CLIENT_METRICS, check_name
from grete.broker.metrics.client_metrics_configs import validate as validate_client_metrics
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.protocol.acls import AclOperation
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AlterConfigsRequest, AlterConfigsResponse, ApiKey
from grete.protocol.topics import validate_topic_name


class AlterResource(Protocol):
    resource_type: int
    resource_name: str


async def answer_each(ctx: RequestContext[Admin], resources: Sequence[AlterResource],
                      apply: Callable[[AlterResource], Awaitable[None]]
                      ) -> list[tuple[AlterResource, KafkaError | None]]:
    """Run ``apply`` on every resource named once; a resource named twice fails in both places."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    results: list[tuple[AlterResource, KafkaError | None]] = []
    for resource in resources:
        if counts[(resource.resource_type, resource.resource_name)] > 1:
            results.append((resource, KafkaError(ErrorCode.INVALID_REQUEST,
                                                 "Each resource must appear at most once.")))
            continue
        try:
            authorize_config_resource(ctx, resource.resource_type, resource.resource_name, AclOperation.ALTER_CONFIGS)
            await apply(resource)
            results.append((resource, None))
        except KafkaError as exc:
            results.append((resource, exc))
    return results


def check_keys(names: list[str], null_names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if null_names:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(null_names))


def check_broker_resource(ctx: RequestContext[Admin], name: str) -> str:
    """This node's id (on a KRaft controller, any broker's) or "" (the cluster-wide default): the
    scope the dynamic configs are kept under."""
    if name:
        try:
            requested = int(name)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
        if requested != ctx.broker.node_id and not ctx.broker.cluster.configures_every_broker:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {ctx.broker.node_id}, but received {name}")
    return name


async def replace_broker_configs(ctx: RequestContext[Admin], name: str, configs: dict[str, str],
                                 validate_only: bool) -> None:
    """Kafka's DynamicBrokerConfig: ``configs`` become the resource's complete dynamic set (this
    broker's, or the cluster default's); keys that cannot change at run time are refused."""
    scope = check_broker_resource(ctx, name)
    own = scope in ("", str(ctx.broker.node_id))
    try:  # another broker's configs are checked against its own configs there, not this node's
        clean = check_dynamic_update(configs, cluster_default=scope == "", current=ctx.broker.config if own else None)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    ctx.broker.cluster.check_broker_configs(scope, ctx.broker.metadata.broker_configs(scope), clean)
    if validate_only:
        await ctx.broker.metadata.validate_configs(BROKER, scope, clean)
        return
    if own:
        await ctx.broker.set_dynamic_configs(scope, clean)
    else:  # kept for the broker named, which applies them; nothing of this node's changes
        await ctx.broker.metadata.set_broker_configs(scope, clean)


async def replace_client_metrics(ctx: RequestContext[Admin], name: str, configs: dict[str, str],
                                 validate_only: bool) -> None:
    """A client-metrics subscription's new config set (an empty one deletes it)."""
    check_name(name)
    clean = validate_client_metrics(configs)
    if validate_only:
        await ctx.broker.metadata.validate_configs(CLIENT_METRICS, name, clean)
    else:
        await ctx.broker.metadata.set_client_metrics(name, clean)


async def replace_group_configs(ctx: RequestContext[Admin], name: str, configs: dict[str, str],
                                validate_only: bool) -> None:
    """A group's new override set, checked as Kafka 4.3's controller checks it (an empty one
    removes the group's overrides)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    try:
        clean = validate_group_configs(configs, ctx.broker.config)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if validate_only:
        await ctx.broker.metadata.validate_configs(GROUP, name, clean)
    else:
        await ctx.broker.metadata.set_group_configs(name, clean)


async def replace_topic_configs(ctx: RequestContext[Admin], name: str, configs: dict[str, str],
                                validate_only: bool) -> None:
    """Validate ``configs`` as the topic's complete override set, then install it live."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    validate_topic_name(name)
    try:
        clean = validate_topic_configs(configs, zookeeper_mode=ctx.broker.config.zookeeper_mode)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if ctx.broker.metadata.topic(name) is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    if validate_only:
        await ctx.broker.metadata.validate_configs(TOPIC, name, clean)
    else:
        await ctx.broker.set_topic_configs(name, clean)


@api(ApiKey.ALTER_CONFIGS, 0, 2)
async def handle(ctx: RequestContext[Admin], request: AlterConfigsRequest) -> AlterConfigsResponse:
    async def apply(resource: AlterResource) -> None:
        assert isinstance(resource, AlterConfigsRequest.AlterConfigsResource)
        check_keys([c.name for c in resource.configs], [c.name for c in resource.configs if c.value is None])
        configs = {c.name: c.value for c in resource.configs if c.value is not None}
        if resource.resource_type == BROKER:
            await replace_broker_configs(ctx, resource.resource_name, configs, request.validate_only)
        elif resource.resource_type == TOPIC:
            await replace_topic_configs(ctx, resource.resource_name, configs, request.validate_only)
        elif resource.resource_type == CLIENT_METRICS:
            await replace_client_metrics(ctx, resource.resource_name, configs, request.validate_only)
        elif resource.resource_type == GROUP:
            await replace_group_configs(ctx, resource.resource_name, configs, request.validate_only)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")

    responses = [AlterConfigsResponse.AlterConfigsResourceResponse(
        error_code=exc.code if exc else 0, error_message=exc.message if exc else None,
        resource_type=resource.resource_type, resource_name=resource.resource_name)
        for resource, exc in await answer_each(ctx, request.resources, apply)]
    return AlterConfigsResponse(responses=responses)
