"""Connection limits as Kafka's ConnectionQuotas applies them as connections are accepted:
``max.connections`` and ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) count
open connections; ``max.connection.creation.rate`` (broker-wide, and per listener as
``listener.name.<listener>.max.connection.creation.rate``) and the IP entity's
``connection_creation_rate`` quota (KIP-612) bound how fast they are made.

A connection over its address's count limit is closed at once, as Kafka closes it. Over the
broker-wide count Kafka's acceptor stops accepting until a connection closes (the client waits in
the listen backlog); asyncio's server cannot pause its accept loop, so grete closes such a
connection right after accepting it instead, and the client reconnects with its back-off.

Over the broker's or the listener's creation rate Kafka's acceptor waits the throttle time before it
takes the connection, and the connections behind it wait in the backlog. grete accepts them but
reads nothing from them until their turn: one queue per listener, in arrival order, the head held
for the throttle time (the client sees the same thing: its connection answers late).

Over its IP's creation rate a connection is not counted and is closed once the throttle time has
passed (Kafka's delayed close), so the client's reconnects are slowed down with it. The rates are
Kafka's Rate over ``quota.window.num`` windows of ``quota.window.size.seconds`` (grete.broker.quotas),
the throttle time the one that brings the rate back to the limit, capped at one window.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import deque
from time import monotonic
from typing import Protocol

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.quotas import SENSOR_EXPIRY_MS, Rate
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore

log = logging.getLogger(__name__)

UNLIMITED = 2**31 - 1  # Kafka's default for both rates (Int.MaxValue): no sensor at all
IP_RATE = "connection_creation_rate"


def parse_overrides(value: str) -> dict[str, int]:
    """``host:limit,host:limit`` (Kafka's format for max.connections.per.ip.overrides)."""
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        host, sep, limit = item.rpartition(":")
        if not sep or not host or not limit.isdigit():
            raise ConfigError(f"Invalid max.connections.per.ip.overrides entry '{item}': expected host:count")
        overrides[host] = int(limit)
    return overrides


class Arrival(Protocol):
    """A connection just accepted, as the quotas see it."""

    peer: str
    listener: str

    def hold(self) -> None:
        """Read nothing until ``admitted`` or closed."""

    def admitted(self) -> None:
        """Counted: serve it."""

    def refuse(self) -> None:
        """Over a count limit: close it now."""

    def throttled(self, delay_s: float) -> None:
        """Over its IP's creation rate: close it after ``delay_s``, uncounted."""


class _Gate:
    """One listener's acceptor: arrivals in order, the head held while the rate is over its limit."""

    __slots__ = ("waiting", "timer")

    def __init__(self) -> None:
        self.waiting: deque[Arrival] = deque()
        self.timer: asyncio.TimerHandle | None = None


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore | None = None) -> None:
        self.total = 0
        self._by_ip: dict[str, int] = {}
        self._samples = config.get_int("quota.window.num")
        self._window_ms = config.get_int("quota.window.size.seconds") * 1000
        self._rates: dict[str, Rate] = {}   # "" broker-wide, "listener:<name>", "ip:<address>"
        self._gates: dict[str, _Gate] = {}
        self._ip_limits: dict[str | None, float] = {}  # None: the default IP entity
        self._last_sweep = 0.0
        self._metadata = metadata
        self.reload(config)
        if metadata is not None:
            metadata.changes.subscribe(self._changed)
            self._reload_ip_quotas()

    # --- configuration -------------------------------------------------------------------------
    def reload(self, config: BrokerConfig) -> None:
        """The limits in force (they are dynamic configs): new connections are counted against them;
        open ones are not closed, as in Kafka."""
        self.max_connections = config.get_int("max.connections")
        self.per_ip = config.get_int("max.connections.per.ip")
        self.overrides = parse_overrides(config.get_str("max.connections.per.ip.overrides"))
        self.broker_rate = config.get_int("max.connection.creation.rate")
        self._config = config
        self.protected = _protected_listener(config)

    def _changed(self, change: MetadataChange) -> None:
        if change.kind is ChangeKind.CLIENT_QUOTAS_CHANGED:
            self._reload_ip_quotas()

    def _reload_ip_quotas(self) -> None:
        assert self._metadata is not None
        limits: dict[str | None, float] = {}
        for entity, values in self._metadata.client_quotas().items():
            named = dict(entity)
            if set(named) == {"ip"} and IP_RATE in values:
                limits[_address(named["ip"])] = values[IP_RATE]
        self._ip_limits = limits

    def listener_rate(self, listener: str) -> int:
        value = self._config.raw(f"listener.name.{listener.lower()}.max.connection.creation.rate")
        return int(value) if value is not None else UNLIMITED

    def ip_rate(self, address: str) -> float:
        """The IP's quota, else the default IP entity's, else none (Kafka's connectionRateForIp)."""
        return self._ip_limits.get(address, self._ip_limits.get(None, UNLIMITED))

    # --- accepting -----------------------------------------------------------------------------
    def arrive(self, conn: Arrival) -> None:
        """A connection was accepted on ``conn.listener``: admitted now, or held, refused or
        throttled as Kafka's acceptor would."""
        gate = self._gates.get(conn.listener)
        if gate is not None and (gate.waiting or gate.timer is not None):
            conn.hold()
            gate.waiting.append(conn)
            return
        self._take(conn, held=False)

    def depart(self, conn: Arrival) -> None:
        """A held connection closed before its turn."""
        gate = self._gates.get(conn.listener)
        if gate is not None and conn in gate.waiting:
            gate.waiting.remove(conn)

    def _take(self, conn: Arrival, *, held: bool) -> None:
        now_ms = monotonic() * 1000
        delay_ms = self._record_listener(conn.listener, now_ms)
        if delay_ms > 0:
            gate = self._gates.setdefault(conn.listener, _Gate())
            if not held:
                conn.hold()
            gate.waiting.appendleft(conn)
            gate.timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._reopen, conn.listener)
            return
        self._after_wait(conn, now_ms)

    def _reopen(self, listener: str) -> None:
        gate = self._gates[listener]
        gate.timer = None
        if gate.waiting:
            self._after_wait(gate.waiting.popleft(), monotonic() * 1000)  # its wait is over: not recorded again
        while gate.waiting and gate.timer is None:
            self._take(gate.waiting.popleft(), held=True)

    def _after_wait(self, conn: Arrival, now_ms: float) -> None:
        limit = self.ip_rate(conn.peer)
        if limit < UNLIMITED:
            self._sweep(now_ms)
            delay_ms = self._record(f"ip:{conn.peer}", limit, now_ms)
            if delay_ms > 0:
                self._unrecord(conn.listener, conn.peer, now_ms)
                log.debug("delaying closing of connection from %s for %d ms", conn.peer, delay_ms)
                conn.throttled(delay_ms / 1000)
                return
        if self._count(conn.peer):
            conn.admitted()
        else:
            log.info("closing connection from %s: max.connections.per.ip / max.connections reached", conn.peer)
            conn.refuse()

    def _record_listener(self, listener: str, now_ms: float) -> int:
        """The wait the broker-wide and listener rates ask of a new connection (the longer one); the
        inter-broker listener is not held to the broker-wide rate. Recorded with no limit set too,
        as Kafka's sensors are: a limit set later applies to the rate connections already made."""
        delay = 0
        if listener != self.protected:
            delay = self._record("", self.broker_rate, now_ms)
        return max(delay, self._record(f"listener:{listener}", self.listener_rate(listener), now_ms))

    def _record(self, key: str, limit: float, now_ms: float) -> int:
        """Kafka's sensor.record(1) against a quota: the throttle time (0 within the limit)."""
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self._samples, self._window_ms, now_ms)
        rate.record(1.0, now_ms)
        if limit >= UNLIMITED:
            return 0
        observed = rate.per_second(now_ms)
        if observed <= limit:
            return 0
        return min(round((observed - limit) / limit * rate.span_ms(now_ms)), self._window_ms)

    def _sweep(self, now_ms: float) -> None:
        """IPs' rates unused for an hour go (Kafka expires their sensors so); looked at once a window."""
        if now_ms - self._last_sweep < self._window_ms:
            return
        self._last_sweep = now_ms
        for key in [k for k, r in self._rates.items() if k.startswith("ip:") and now_ms - r.last_used > SENSOR_EXPIRY_MS]:
            del self._rates[key]

    def _unrecord(self, listener: str, peer: str, now_ms: float) -> None:
        """An IP-throttled connection is not one the broker made: out of every rate again."""
        keys = [f"ip:{peer}", f"listener:{listener}"] + ([""] if listener != self.protected else [])
        for key in keys:
            rate = self._rates.get(key)
            if rate is not None:
                rate.record(-1.0, now_ms)

    # --- counting ------------------------------------------------------------------------------
    def _count(self, address: str) -> bool:
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


def _address(ip: str | None) -> str | None:
    """An IP as connections' peers are written (an IPv6 address compressed), so both compare."""
    if ip is None:
        return None
    try:
        return ipaddress.ip_address(ip).compressed
    except ValueError:
        return ip


def _protected_listener(config: BrokerConfig) -> str | None:
    """The inter-broker listener, exempt from the broker-wide rate when there is another one."""
    listeners = config.get_list("listeners")
    if len(listeners) < 2:
        return None
    return (config.get_str("inter.broker.listener.name") or config.get_str("security.inter.broker.protocol")
            or "PLAINTEXT")
