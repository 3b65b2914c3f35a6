"""Listeners as Kafka's ``listeners`` / ``advertised.listeners`` name them: ``NAME://host:port``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grete.broker.config import ConfigError


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
