"""``max.connections`` and ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``),
counted as Kafka's ConnectionQuotas counts them.

A connection over its address's limit is closed at once, as Kafka closes it. Over the broker-wide
limit Kafka's acceptor stops accepting until a connection closes (the client waits in the listen
backlog); asyncio's server cannot pause its accept loop, so grete closes such a connection right
after accepting it instead, and the client reconnects with its back-off.
"""

from __future__ import annotations

from grete.broker.config import BrokerConfig, ConfigError


def parse_overrides(value: str) -> dict[str, int]:
    """``host:limit,host:limit`` (Kafka's format for max.connections.per.ip.overrides)."""
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        host, sep, limit = item.rpartition(":")
        if not sep or not host or not limit.isdigit():
            raise ConfigError(f"Invalid max.connections.per.ip.overrides entry '{item}': expected host:count")
        overrides[host] = int(limit)
    return overrides


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig) -> None:
        self.total = 0
        self._by_ip: dict[str, int] = {}
        self.reload(config)

    def reload(self, config: BrokerConfig) -> None:
        """The limits in force (they are dynamic configs): new connections are counted against them;
        open ones are not closed, as in Kafka."""
        self.max_connections = config.get_int("max.connections")
        self.per_ip = config.get_int("max.connections.per.ip")
        self.overrides = parse_overrides(config.get_str("max.connections.per.ip.overrides"))

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (and not counted) when over a limit."""
        count = self._by_ip.get(address, 0)
        if count >= self.overrides.get(address, self.per_ip) or self.total >= self.max_connections:
            return False
        self._by_ip[address] = count + 1
        self.total += 1
        return True

    def release(self, address: str) -> None:
        count = self._by_ip.get(address, 0) - 1
        if count <= 0:
            self._by_ip.pop(address, None)
        else:
            self._by_ip[address] = count
        self.total -= 1
