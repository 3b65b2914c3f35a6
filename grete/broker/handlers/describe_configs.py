"""DescribeConfigs (32): topic, broker and broker-logger configs with sources and synonyms.

A topic config's value is its override, else its broker synonym chain (``log.retention.ms`` ->
``log.retention.minutes`` -> ``log.retention.hours``, static before default), else the topic
default; ``config_source`` names where the value came from and ``synonyms`` (when asked) lists
that chain in Kafka's order: topic override first, then dynamic/static/default broker entries.
As Kafka's ConfigHelper, broker synonyms listed ahead of the primary one are dropped (a filter meant
for listener-prefixed keys): ``retention.ms`` with ``log.retention.hours`` set (or defaulted) and
``log.retention.ms`` not is DEFAULT_CONFIG with no synonyms, its value the effective one.

The entry builders here are shared by CreateTopics (v5+ returns a new topic's configs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from grete.broker.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    ZK_TOPIC_CONFIGS,
    BrokerConfig,
    ConfigDef,
    ConfigSource,
    ConfigType,
    broker_synonyms,
    config_definition,
    topic_configs,
)
from grete.broker.groups.group_configs import GROUP_CONFIGS
from grete.broker.metrics.client_metrics_configs import CLIENT_METRICS
from grete.broker.metrics.client_metrics_configs import describe as describe_client_metrics
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DescribeConfigsRequest, DescribeConfigsResponse
from grete.protocol.topics import validate_topic_name

# ConfigResource.Type ids
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
DYNAMIC_BROKER_LOGGER_CONFIG = 6  # ConfigSource id Kafka uses for logger levels

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


@dataclass(slots=True)
class ConfigEntry:
    """One resolved config: what DescribeConfigs and CreateTopics (v5+) report."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: ConfigType
    doc: str | None
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


# --- resolution -----------------------------------------------------------------------------
def _broker_chain(config: BrokerConfig, key: str, sensitive: bool) -> list[tuple[str, str | None, int]]:
    """(name, value, source) for each broker synonym of ``key`` that is set, in Kafka's order: this
    broker's dynamic configs, the cluster-wide dynamic default, server.properties, the default."""
    chain = broker_synonyms(key)
    found: list[tuple[str, str | None, int]] = []
    for layer, source in ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        for name in chain:
            if name in layer:
                found.append((name, None if sensitive else layer[name], source))
    for name in chain:
        if name in config.originals:
            found.append((name, None if sensitive else config.originals[name],
                          ConfigSource.STATIC_BROKER_CONFIG))
    for name in chain:
        default = config.default(name)
        if default is not None:
            found.append((name, None if sensitive else default, ConfigSource.DEFAULT_CONFIG))
    return found


def topic_config_entry(config: BrokerConfig, overrides: dict[str, str], key: str, *,
                       with_docs: bool = False) -> ConfigEntry:
    definition, synonym = ZK_TOPIC_CONFIGS[key]
    sensitive = definition.type == ConfigType.PASSWORD
    synonyms = _broker_chain(config, synonym, sensitive) if synonym is not None else []
    while synonyms and synonyms[0][0] != synonym:
        synonyms.pop(0)
    if key in overrides:
        value: str | None = overrides[key]
        synonyms.insert(0, (key, None if sensitive else value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
    else:
        value = config.topic_default(key)
    source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
    return ConfigEntry(key, None if sensitive else value, source, False, sensitive, definition.type,
                       _doc(definition) if with_docs else None, synonyms)


def topic_config_entries(config: BrokerConfig, overrides: dict[str, str], *,
                         with_docs: bool = False) -> list[ConfigEntry]:
    """Every topic config, sorted by name (as CreateTopics answers them)."""
    return [topic_config_entry(config, overrides, key, with_docs=with_docs)
            for key in sorted(topic_configs(config.zookeeper_mode))]


def broker_config_entry(config: BrokerConfig, key: str, *, with_docs: bool = False) -> ConfigEntry:
    definition = BROKER_CONFIGS[key]
    sensitive = definition.type == ConfigType.PASSWORD
    chain = _broker_chain(config, key, sensitive)
    # Kafka drops coarser/finer siblings listed before the key itself (log.retention.ms when
    # describing log.retention.hours): they are synonyms of a different entry.
    while chain and chain[0][0] != key:
        chain.pop(0)
    if key == "broker.id":
        return _broker_id_entry(config, with_docs)
    # A key set nowhere shows its own default, null for log.retention.ms and its kin (Kafka 4.3
    # does not fill in the value derived from log.retention.hours: that shows under its own name).
    value = chain[0][1] if chain else config.default(key)
    source = chain[0][2] if chain else ConfigSource.DEFAULT_CONFIG
    # Kafka marks the configs it can change at run time (DynamicBrokerConfig) as not read-only.
    return ConfigEntry(key, None if sensitive else value, source, key not in DYNAMIC_BROKER_CONFIGS, sensitive,
                       definition.type, _doc(definition) if with_docs else None, chain)


def _broker_id_entry(config: BrokerConfig, with_docs: bool) -> ConfigEntry:
    """broker.id is the node id whichever of the two names set it, as Kafka's KafkaConfig fills it
    in from node.id; its own -1 default stays listed last. Unconfigured, grete's node.id default
    is the value, named as such in the first synonym."""
    definition = BROKER_CONFIGS["broker.id"]
    node_id = str(config.node_id)
    if "node.id" in config.originals or "broker.id" in config.originals:
        source, first = ConfigSource.STATIC_BROKER_CONFIG, ("broker.id", node_id, ConfigSource.STATIC_BROKER_CONFIG)
    else:
        source, first = ConfigSource.DEFAULT_CONFIG, ("node.id", node_id, ConfigSource.DEFAULT_CONFIG)
    chain: list[tuple[str, str | None, int]] = [first, ("broker.id", definition.default, ConfigSource.DEFAULT_CONFIG)]
    return ConfigEntry("broker.id", node_id, source, True, False, definition.type,
                       _doc(definition) if with_docs else None, chain)


def group_config_entries(config: BrokerConfig, overrides: dict[str, str], *,
                         with_docs: bool = False) -> list[ConfigEntry]:
    """A group's configs (Kafka 4): its override (GROUP_CONFIG), else the broker key's value."""
    entries = []
    for key, definition in sorted(GROUP_CONFIGS.items()):
        synonyms = _broker_chain(config, definition.synonym, False)
        if key in overrides:
            synonyms.insert(0, (key, overrides[key], ConfigSource.GROUP_CONFIG))
        value = synonyms[0][1] if synonyms else None
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        broker_definition = BROKER_CONFIGS.get(definition.synonym)
        doc = _doc(broker_definition) if with_docs and broker_definition is not None else None
        entries.append(ConfigEntry(key, value, source, False, False, definition.type, doc, synonyms))
    return entries


def client_metrics_entries(name: str, configs: dict[str, str], with_docs: bool) -> list[ConfigEntry]:
    """A subscription's three keys; only the set ones list themselves as their synonym."""
    return [ConfigEntry(key, value, source, False, False, type_, doc if with_docs else None,
                        [(key, value, source)] if is_set else [])
            for key, value, source, type_, doc, is_set in describe_client_metrics(name, configs)]


def default_broker_entries(config: BrokerConfig, *, with_docs: bool = False) -> list[ConfigEntry]:
    """The cluster-wide default resource (broker name ""): only the dynamic defaults that are set."""
    entries = []
    for key, value in sorted(config.dynamic_default.items()):
        definition = config_definition(key)
        kind, sensitive = _kind(key, definition)
        shown = None if sensitive else value
        entries.append(ConfigEntry(key, shown, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False, sensitive,
                                   kind, _doc(definition) if with_docs and definition is not None else None,
                                   [(key, shown, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]))
    return entries


# The authorizer's own configs, not KafkaConfig's: Kafka lists them only when set, of a type it does
# not know, so as sensitive (no value).
AUTHORIZER_KEYS = frozenset({"super.users", "allow.everyone.if.no.acl.found"})
# Kafka's dynamic-only broker configs (DynamicConfig.Broker, the replication throttles): listed only
# when set, with their value, and with no default among their synonyms.
DYNAMIC_ONLY_KEYS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                               "replica.alter.log.dirs.io.max.bytes.per.second"})
_LISTED_WHEN_SET = AUTHORIZER_KEYS | DYNAMIC_ONLY_KEYS


def broker_entries(config: BrokerConfig, *, with_docs: bool = False) -> list[ConfigEntry]:
    """A broker resource: every broker config, and the keys set on it that are none of Kafka's own (a
    listener's override, a custom, an authorizer's or a dynamic-only key), as Kafka lists its originals."""
    entries = [broker_config_entry(config, key, with_docs=with_docs)
               for key in sorted(BROKER_CONFIGS) if key not in _LISTED_WHEN_SET]
    layers = ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
              (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
              (config.originals, ConfigSource.STATIC_BROKER_CONFIG))
    others = {key for layer, _ in layers for key in layer} - (BROKER_CONFIGS.keys() - _LISTED_WHEN_SET)
    for key in sorted(others):
        definition = config_definition(key)
        kind, sensitive = _kind(key, definition)
        synonyms: list[tuple[str, str | None, int]] = [(key, None if sensitive else layer[key], source)
                                                       for layer, source in layers if key in layer]
        entries.append(ConfigEntry(key, synonyms[0][1], synonyms[0][2], key not in DYNAMIC_BROKER_CONFIGS,
                                   sensitive, kind, _doc(definition) if with_docs and definition is not None else None,
                                   synonyms))
    return sorted(entries, key=lambda entry: entry.name)


def _kind(key: str, definition: ConfigDef | None) -> tuple[ConfigType, bool]:
    """A key's type and whether its value is hidden: Kafka hides a password and any key whose type
    it does not know (KafkaConfig.maybeSensitive)."""
    if definition is None or key in AUTHORIZER_KEYS:
        return ConfigType.UNKNOWN, True
    return definition.type, definition.type == ConfigType.PASSWORD or definition.sensitive


def _doc(definition: ConfigDef) -> str | None:
    return definition.doc or None


# --- handler --------------------------------------------------------------------------------
@api(ApiKey.DESCRIBE_CONFIGS, 0, 4, advertised_min=1)
def handle(ctx: RequestContext[Admin], request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            authorize_config_resource(ctx, resource.resource_type, resource.resource_name, Op.DESCRIBE_CONFIGS)
            entries = _describe(ctx, resource, request.include_documentation and ctx.version >= 3)
            keys = resource.configuration_keys
            if keys:
                wanted = set(keys)
                entries = [e for e in entries if e.name in wanted]
            # Kafka's result carries the empty string, not null, when there is no message.
            result = Result(error_code=0, error_message="",
                            configs=[_encode(e, request.include_synonyms, ctx.version) for e in entries])
        except KafkaError as exc:
            result = Result(error_code=exc.code, error_message=exc.message or "", configs=[])
        result.resource_type = resource.resource_type
        result.resource_name = resource.resource_name
        results.append(result)
    return DescribeConfigsResponse(results=results)


def _describe(ctx: RequestContext[Admin], resource: DescribeConfigsRequest.DescribeConfigsResource,
              with_docs: bool) -> list[ConfigEntry]:
    broker = ctx.broker
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        validate_topic_name(name)
        meta = broker.metadata.topic(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # Kafka sends no message here
        return topic_config_entries(broker.config, meta.configs, with_docs=with_docs)
    if resource.resource_type == BROKER:
        if not name:
            return default_broker_entries(broker.config, with_docs=with_docs)
        check_broker_id(name, broker.node_id)
        return broker_entries(broker.config, with_docs=with_docs)
    if resource.resource_type == GROUP:
        return group_config_entries(broker.config, broker.metadata.group_configs(name), with_docs=with_docs)
    if resource.resource_type == CLIENT_METRICS:
        return client_metrics_entries(name, broker.metadata.client_metrics(name), with_docs)
    if resource.resource_type == BROKER_LOGGER:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        check_broker_id(name, broker.node_id)
        return logger_entries()
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {_type_name(resource.resource_type)}")


def authorize_config_resource(ctx: RequestContext[Admin], resource_type: int, name: str, operation: Op) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the resource (the cluster for brokers and their loggers);
    raises Kafka's authorization error of that resource type."""
    if ctx.broker.authorizer is None:
        return
    if resource_type == TOPIC and not allowed(ctx, operation, Res.TOPIC, name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS) and not cluster_allowed(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if resource_type == GROUP and not allowed(ctx, operation, Res.GROUP, name):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)


def check_broker_id(name: str, node_id: int) -> None:
    try:
        requested = int(name)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if requested != node_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {node_id} or empty string, but received {name}")


def _type_name(resource_type: int) -> str:
    return {0: "UNKNOWN", 16: "CLIENT_METRICS", 32: "GROUP"}.get(resource_type, "UNKNOWN")


def _encode(entry: ConfigEntry, include_synonyms: bool, version: int) -> Entry:
    synonyms = [Synonym(name=n, value=v, source=s) for n, v, s in entry.synonyms] if include_synonyms else []
    return Entry(name=entry.name, value=entry.value, read_only=entry.read_only,
                 config_source=entry.source, is_sensitive=entry.sensitive, synonyms=synonyms,
                 config_type=entry.type if version >= 3 else 0, documentation=entry.doc)
    # v0's IsDefault stays false: Kafka 3.9 never sets it (its entries carry a source from v1 on)


# --- broker loggers (Python logging levels under Kafka's log4j names) --------------------------
LOG4J_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
                "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
ROOT_LOGGER = "root"


def level_name(level: int) -> str:
    best = "TRACE"
    for name, value in LOG4J_LEVELS.items():
        if level >= value:
            best = name
    return best


def logger_entries() -> list[ConfigEntry]:
    """The root logger and every ``grete`` logger, with its effective level."""
    names = sorted(n for n in logging.root.manager.loggerDict if n == "grete" or n.startswith("grete."))
    entries = [ConfigEntry(ROOT_LOGGER, level_name(logging.root.level), DYNAMIC_BROKER_LOGGER_CONFIG,
                           False, False, ConfigType.UNKNOWN, None)]
    for name in names:
        level = logging.getLogger(name).getEffectiveLevel()
        entries.append(ConfigEntry(name, level_name(level), DYNAMIC_BROKER_LOGGER_CONFIG, False, False,
                                   ConfigType.UNKNOWN, None))
    return entries
