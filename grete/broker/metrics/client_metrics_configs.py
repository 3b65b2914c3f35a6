"""Client-metrics subscriptions (KIP-714's ConfigResource type CLIENT_METRICS): named config sets with
``metrics``, ``interval.ms`` and ``match``, kept in the metadata store and shown by DescribeConfigs
and ListConfigResources, as ``kafka-client-metrics.sh`` manages them.

The checks, messages, stored forms and described entries are Kafka 4.3.1's, measured with raw
requests (compat-tests/wire/test_wire_client_metrics.py). Kafka 4.3.1 without a telemetry
reporter keeps the subscriptions without serving them (it does not advertise
GetTelemetrySubscriptions), and so does grete.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from grete.broker.config import ConfigSource, ConfigType
from grete.protocol.errors import ErrorCode, KafkaError

CLIENT_METRICS = 16
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
MATCH_KEYS = frozenset({"client_instance_id", "client_id", "client_software_name", "client_software_version",
                        "client_source_address", "client_source_port"})


@dataclass(frozen=True, slots=True)
class ClientMetricsDef:
    name: str
    type: ConfigType
    default: str
    doc: str


# In Kafka's definition order, which is also the order it checks values in.
DEFINITIONS: dict[str, ClientMetricsDef] = {d.name: d for d in [
    ClientMetricsDef(METRICS, ConfigType.LIST, "", "Telemetry metric name prefix list"),
    ClientMetricsDef(INTERVAL_MS, ConfigType.INT, "300000", "Metrics push interval in milliseconds"),
    ClientMetricsDef(MATCH, ConfigType.LIST, "", "Client match criteria"),
]}


def check_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")


def validate(configs: Mapping[str, str]) -> dict[str, str]:
    """A subscription's complete config set, checked as Kafka checks it; returns the stored form
    (list items trimmed and comma-joined, numbers re-rendered). Raises KafkaError."""
    for name in configs:
        if name not in DEFINITIONS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {name}")
    clean: dict[str, str] = {}
    for name, definition in DEFINITIONS.items():
        if name in configs:
            clean[name] = _parse(definition, configs[name])
    if INTERVAL_MS in clean and not MIN_INTERVAL_MS <= int(clean[INTERVAL_MS]) <= MAX_INTERVAL_MS:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid value {clean[INTERVAL_MS]} for interval.ms, interval must be between "
                         f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    for pattern in _items(clean.get(MATCH, "")):
        _check_match(pattern)
    return clean


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",")] if value.strip() else []


def _parse(definition: ClientMetricsDef, raw: str) -> str:
    if definition.type is ConfigType.INT:
        try:
            return str(int(raw.strip()))
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {raw} for configuration {definition.name}: Not a number of type INT") from None
    items = _items(raw)
    if "" in items:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Configuration '{definition.name}' values must not be empty.")
    return ",".join(items)


def _check_match(pattern: str) -> None:
    """``<selector>=<regex>``: one '=', a known selector, a non-empty regex that compiles. The
    selector values themselves (an instance id's form, a port's digits) are not checked, as in Kafka."""
    parts = pattern.split("=")
    while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
        parts.pop()
    if len(parts) != 2 or parts[0].strip() not in MATCH_KEYS or not parts[1].strip():
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
    try:
        # Java's named groups are (?<name>...); Python spells them (?P<name>...).
        re.compile(re.sub(r"\(\?<(?=[A-Za-z])", "(?P<", parts[1].strip()))
    except re.error:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}") from None


Described = tuple[str, str, int, ConfigType, str, bool]


def describe(name: str, configs: Mapping[str, str]) -> list[Described]:
    """(key, value, source, type, doc, set) for each key, by name: a set key with source
    CLIENT_METRICS_CONFIG, else its default (DEFAULT_CONFIG). An unknown name describes as defaults."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
    entries: list[Described] = []
    for key, definition in sorted(DEFINITIONS.items()):
        if key in configs:
            entries.append((key, configs[key], ConfigSource.CLIENT_METRICS_CONFIG, definition.type, definition.doc, True))
        else:
            entries.append((key, definition.default, ConfigSource.DEFAULT_CONFIG, definition.type, definition.doc, False))
    return entries
