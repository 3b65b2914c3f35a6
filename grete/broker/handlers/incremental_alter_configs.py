"""IncrementalAlterConfigs (44): v0-1, SET / DELETE / APPEND / SUBTRACT per key.

Topic resources change only the named keys; APPEND and SUBTRACT work on LIST configs
(``cleanup.policy``, the throttled-replica lists), starting from the override or, without one,
from the topic default, as Kafka's controller does. Broker resources change this broker's (or, with
an empty name, the cluster default's) dynamic configs key by key, validated as in AlterConfigs;
group resources likewise change a group's overrides key by key.
Broker-logger resources set or reset Python logging levels under
Kafka's log4j names, live and not persisted, like Kafka's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from grete.broker.config import BROKER_CONFIGS, ConfigDef, ConfigType, topic_configs
from grete.broker.handlers.alter_configs import (
    AlterResource,
    answer_each,
    check_broker_resource,
    check_keys,
    replace_broker_configs,
    replace_client_metrics,
    replace_group_configs,
    replace_topic_configs,
)
from grete.broker.handlers.describe_configs import (
    BROKER,
    BROKER_LOGGER,
    GROUP,
    LOG4J_LEVELS,
    ROOT_LOGGER,
    TOPIC,
    check_broker_id,
)
from grete.broker.metrics.client_metrics_configs import CLIENT_METRICS
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
# The levels a broker logger may be set to (Kafka's LogLevelConfig.VALID_LOG_LEVELS: OFF is only described).
SETTABLE_LEVELS = frozenset({"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"})
Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
Op = IncrementalAlterConfigsRequest.AlterableConfig


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle(ctx: RequestContext[Admin], request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    async def apply(resource: AlterResource) -> None:
        assert isinstance(resource, Resource)
        await _apply(ctx, resource, request.validate_only)

    responses = [IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
        error_code=exc.code if exc else 0, error_message=exc.message if exc else None,
        resource_type=resource.resource_type, resource_name=resource.resource_name)
        for resource, exc in await answer_each(ctx, request.resources, apply)]
    return IncrementalAlterConfigsResponse(responses=responses)


async def _apply(ctx: RequestContext[Admin], resource: Resource, validate_only: bool) -> None:
    ops = resource.configs
    check_keys([op.name for op in ops],
               [op.name for op in ops if op.config_operation != DELETE and op.value is None])
    if resource.resource_type == BROKER_LOGGER:
        _alter_loggers(ctx, resource, validate_only)
        return
    for op in ops:
        if op.config_operation not in OP_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.config_operation}")
    if resource.resource_type == BROKER:
        scope = check_broker_resource(ctx, resource.resource_name)
        current = ctx.broker.metadata.broker_configs(scope)
        await replace_broker_configs(ctx, scope, _incremental(current, ops, BROKER_CONFIGS), validate_only)
    elif resource.resource_type == GROUP:
        name = resource.resource_name
        await replace_group_configs(ctx, name, _incremental(ctx.broker.metadata.group_configs(name), ops, {}),
                                    validate_only)
    elif resource.resource_type == CLIENT_METRICS:
        # Kafka refuses APPEND/SUBTRACT here as on a non-list key, whatever the key: no definitions.
        name = resource.resource_name
        await replace_client_metrics(ctx, name, _incremental(ctx.broker.metadata.client_metrics(name), ops, {}),
                                     validate_only)
    elif resource.resource_type == TOPIC:
        meta = ctx.broker.metadata.topic(resource.resource_name)
        current = dict(meta.configs) if meta is not None else {}
        await replace_topic_configs(ctx, resource.resource_name,
                                    _incremental(current, ops, {k: d for k, (d, _) in topic_configs(ctx.broker.config.zookeeper_mode).items()}),
                                    validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")


def _incremental(current: dict[str, str], ops: list[Op], definitions: Mapping[str, ConfigDef]) -> dict[str, str]:
    """The override set after applying ``ops`` in order to ``current`` (APPEND/SUBTRACT only on LIST
    configs of ``definitions``)."""
    configs = dict(current)
    for op in ops:
        if op.config_operation == SET:
            assert op.value is not None
            configs[op.name] = op.value
        elif op.config_operation == DELETE:
            configs.pop(op.name, None)
        else:
            configs[op.name] = _append_or_subtract(configs.get(op.name), op, definitions)
    return configs


def _append_or_subtract(value: str | None, op: Op, definitions: Mapping[str, ConfigDef]) -> str:
    definition = definitions.get(op.name)
    if definition is None or definition.type != ConfigType.LIST:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Can't {OP_NAMES[op.config_operation]} to key {op.name} because its type is not LIST.")
    if value is None:
        value = definition.default or ""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    assert op.value is not None
    for item in (p.strip() for p in op.value.split(",")):
        if op.config_operation == APPEND and item and item not in parts:
            parts.append(item)
        elif op.config_operation == SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


def _alter_loggers(ctx: RequestContext[Admin], resource: Resource, validate_only: bool) -> None:
    """SET a logger to a log4j level name, or DELETE to inherit its parent's."""
    name = resource.resource_name
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    check_broker_id(name, ctx.broker.node_id)
    changes: list[tuple[logging.Logger, int]] = []
    for op in resource.configs:
        logger = logging.root if op.name == ROOT_LOGGER else logging.getLogger(op.name)
        if op.config_operation == SET:
            level = LOG4J_LEVELS.get(op.value or "") if op.value in SETTABLE_LEVELS else None
            if level is None:  # Kafka's LogLevelConfig.VALID_LOG_LEVELS, by exact name
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {op.name} to "
                                 f"{op.value} as it is not a supported log level. Valid log levels are "
                                 f"{', '.join(sorted(SETTABLE_LEVELS))}")
            changes.append((logger, level))
        elif op.config_operation == DELETE:
            if logger is logging.root:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Removing the log level of the root logger is not allowed")
            changes.append((logger, logging.NOTSET))
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Operation {OP_NAMES.get(op.config_operation, op.config_operation)} "
                             "is not supported for broker loggers")
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)
