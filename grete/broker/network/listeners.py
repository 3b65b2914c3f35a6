"""Listeners as Kafka's ``listeners`` / ``advertised.listeners`` name them: ``NAME://host:port``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grete.broker.config import BrokerConfig, ConfigError, StartupError


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(values: list[str]) -> list[Listener]:
    """``NAME://host:port`` entries; an empty host means all interfaces, as in Kafka."""
    listeners = []
    for value in values:
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", value.strip())
        if not match:
            raise ConfigError(f"Invalid listener '{value}': expected NAME://host:port")
        host = match.group(2).strip("[]")
        listeners.append(Listener(match.group(1).upper(), host, int(match.group(3))))
    return listeners


SUPPORTED = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_protocol(config: BrokerConfig, listener: str) -> str:
    """The listener's security protocol from ``listener.security.protocol.map``; ConfigError for a
    listener the map does not name (as Kafka refuses it) or a protocol grete does not serve yet."""
    mapping: dict[str, str] = {}
    for entry in config.get_list("listener.security.protocol.map"):
        name, sep, protocol = entry.partition(":")
        if not sep:
            raise ConfigError(f"Invalid listener.security.protocol.map entry '{entry}': expected NAME:PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    found = mapping.get(listener.upper())
    if found is None:
        raise ConfigError(f"No security protocol defined for listener {listener}")
    protocol = found
    if protocol not in SUPPORTED:
        raise ConfigError(f"listener {listener}: security protocol {protocol} is not supported yet "
                          f"(grete serves {', '.join(SUPPORTED)})")
    return protocol


def inter_broker_listener(config: BrokerConfig) -> str:
    """``inter.broker.listener.name``, else the listener named after
    ``security.inter.broker.protocol`` (Kafka's rule)."""
    return config.get_str("inter.broker.listener.name") or config.get_str("security.inter.broker.protocol") or "PLAINTEXT"


def check_internal_listeners(config: BrokerConfig, inter_broker: bool, controller: bool) -> None:
    """grete's brokers and controllers connect to each other (replication, the controller's and the
    quorum's requests, transaction markers) without SASL or TLS. A node of a cluster whose inter-broker
    or controller listener asks for either is refused at start, naming the listener, rather than
    left to have every such connection closed by its peers."""
    internal = ([("inter-broker", inter_broker_listener(config))] if inter_broker else []) + (
        [("controller", name) for name in config.get_list("controller.listener.names")] if controller else [])
    for role, name in internal:
        protocol = security_protocol(config, name)
        if protocol != "PLAINTEXT":
            raise StartupError(f"the {role} listener {name} uses {protocol}: grete's brokers and controllers "
                               f"connect to each other in PLAINTEXT only; give that traffic a PLAINTEXT listener "
                               f"(SASL and TLS serve clients on the others)")
