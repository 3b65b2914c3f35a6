"""Group configs (ConfigResource type GROUP, Kafka 4): per-group overrides of the broker's
``group.consumer.*``, ``group.share.*`` and ``group.streams.*`` settings, described with the broker
key as their synonym and stored in the metadata store.

The names, defaults, synonyms and bounds are Kafka 4.3.1's, as DescribeConfigs and
IncrementalAlterConfigs answer them there (checked against it: an unknown name is "Unknown group
config name", a session timeout below the broker minimum names the broker key). KIP-848 consumer
groups use consumer.session.timeout.ms and consumer.heartbeat.interval.ms; streams groups
streams.session.timeout.ms, streams.heartbeat.interval.ms, streams.initial.rebalance.delay.ms and
streams.num.standby.replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from grete.broker.config import BrokerConfig, ConfigError, ConfigType
from grete.coordinator.share.share_reset import INVALID_MESSAGE, parse_reset


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: ConfigType
    synonym: str                 # the broker key whose value is the default
    minimum: str | None = None   # broker keys bounding the value
    maximum: str | None = None
    choices: tuple[str, ...] | None = None


_INT, _STR, _BOOL = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN
GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in [
    GroupConfigDef("consumer.assignment.interval.ms", _INT, "group.consumer.assignment.interval.ms"),
    GroupConfigDef("consumer.heartbeat.interval.ms", _INT, "group.consumer.heartbeat.interval.ms",
                   "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    GroupConfigDef("consumer.session.timeout.ms", _INT, "group.consumer.session.timeout.ms",
                   "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    GroupConfigDef("share.assignment.interval.ms", _INT, "group.share.assignment.interval.ms"),
    GroupConfigDef("share.auto.offset.reset", _STR, "share.auto.offset.reset"),
    GroupConfigDef("share.delivery.count.limit", _INT, "group.share.delivery.count.limit",
                   "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    GroupConfigDef("share.heartbeat.interval.ms", _INT, "group.share.heartbeat.interval.ms",
                   "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    GroupConfigDef("share.isolation.level", _STR, "share.isolation.level",
                   choices=("read_committed", "read_uncommitted")),
    GroupConfigDef("share.partition.max.record.locks", _INT, "group.share.partition.max.record.locks"),
    GroupConfigDef("share.record.lock.duration.ms", _INT, "group.share.record.lock.duration.ms",
                   "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
    GroupConfigDef("share.renew.acknowledge.enable", _BOOL, "share.renew.acknowledge.enable"),
    GroupConfigDef("share.session.timeout.ms", _INT, "group.share.session.timeout.ms",
                   "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    GroupConfigDef("streams.assignment.interval.ms", _INT, "group.streams.assignment.interval.ms"),
    GroupConfigDef("streams.heartbeat.interval.ms", _INT, "group.streams.heartbeat.interval.ms",
                   "group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms"),
    GroupConfigDef("streams.initial.rebalance.delay.ms", _INT, "group.streams.initial.rebalance.delay.ms"),
    GroupConfigDef("streams.num.standby.replicas", _INT, "group.streams.num.standby.replicas",
                   maximum="group.streams.max.standby.replicas"),
    GroupConfigDef("streams.session.timeout.ms", _INT, "group.streams.session.timeout.ms",
                   "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
]}


def validate_group_configs(configs: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    """A group's complete override set, checked as Kafka checks it; ConfigError names the problem."""
    for name, value in configs.items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown group config name: {name}")
        if definition.type is ConfigType.INT:
            try:
                number = int(value)
            except ValueError:
                raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
            if definition.minimum is not None and number < broker.get_int(definition.minimum):
                raise ConfigError(f"{name} must be greater than or equal to {definition.minimum}")
            if definition.maximum is not None and number > broker.get_int(definition.maximum):
                raise ConfigError(f"{name} must be less than or equal to {definition.maximum}")
        elif definition.type is ConfigType.BOOLEAN and value.lower() not in ("true", "false"):
            raise ConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either true or false")
        elif name == "share.auto.offset.reset" and parse_reset(value) is None:
            raise ConfigError(f"Invalid value {value} for configuration {name}: {INVALID_MESSAGE.format(value=value)}")
        elif definition.choices is not None and value not in definition.choices:
            raise ConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                              f"{', '.join(definition.choices)}")
    return dict(configs)
