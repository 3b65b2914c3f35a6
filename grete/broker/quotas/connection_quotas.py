"""Connection limits as Kafka's ConnectionQuotas applies them as connections are accepted:
``max.connections`` (broker-wide, and per listener as ``listener.name.<listener>.max.connections``)
and ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) count open connections;
``max.connection.creation.rate`` (broker-wide, and per listener) and the IP entity's
``connection_creation_rate`` quota (KIP-612) bound how fast they are made.

A connection over its address's count limit is closed at once, as Kafka closes it.

Over the broker's or the listener's count or creation rate Kafka's acceptor stops: it waits for
the throttle time, or until a connection closes, before it takes the connection, and those behind it
wait in the kernel's listen backlog. asyncio's server cannot stop accepting, so grete accepts them
but reads nothing from them until their turn: one queue per listener, in arrival order, its head
held for the throttle time and for a free slot (the client sees the same thing: its connection
answers late). At most ``LISTEN_BACKLOG`` wait on a listener; more are closed.

Over its IP's creation rate a connection is not counted and is closed once the throttle time has
passed (Kafka's delayed close), so the client's reconnects are slowed down with it. The rates are
Kafka's Rate over ``quota.window.num`` windows of ``quota.window.size.seconds`` (grete.broker.quotas.client_quotas),
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
from grete.broker.quotas.client_quotas import SENSOR_EXPIRY_MS, Rate, ThrottleAverage
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore

log = logging.getLogger(__name__)

UNLIMITED = 2**31 - 1  # Kafka's default for the limits (Int.MaxValue)
# The listen backlog grete asks of the kernel; as many accepted connections may wait on a listener
# for their turn (Kafka's wait in the kernel's backlog), any more are closed.
LISTEN_BACKLOG = 1024
THROTTLE_SPAN_MS = 60_000  # Kafka's default MetricConfig: 2 samples of 30 s
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

    __slots__ = ("waiting", "head", "timer")

    def __init__(self) -> None:
        self.waiting: deque[Arrival] = deque()
        self.head: Arrival | None = None  # recorded, waiting for its throttle time or for a slot
        self.timer: asyncio.TimerHandle | None = None


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore | None = None) -> None:
        self.total = 0
        self._by_ip: dict[str, int] = {}
        self._by_listener: dict[str, int] = {}
        self._samples = config.get_int("quota.window.num")
        self._window_ms = config.get_int("quota.window.size.seconds") * 1000
        self._rates: dict[str, Rate] = {}   # "" broker-wide, "listener:<name>", "ip:<address>"
        self._gates: dict[str, _Gate] = {}
        # Per listener, the mean of the non-zero throttle times given over the broker's or the
        # listener's rate ("rate") and over IPs' quotas ("ip"): Kafka's *connection-accept-throttle-time.
        self._throttles: dict[tuple[str, str], ThrottleAverage] = {}
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
        self._wake_waiting()  # a limit raised: those waiting for a slot may go on

    def _wake_waiting(self) -> None:
        for name, gate in self._gates.items():
            if gate.head is not None and gate.timer is None:
                self._advance(name)

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

    def listener_max(self, listener: str) -> int:
        value = self._config.raw(f"listener.name.{listener.lower()}.max.connections")
        return int(value) if value is not None else UNLIMITED

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
        gate = self._gates.setdefault(conn.listener, _Gate())
        if gate.head is not None or gate.waiting:
            if len(gate.waiting) >= LISTEN_BACKLOG:
                log.info("closing connection from %s: %d connections already wait on listener %s",
                         conn.peer, LISTEN_BACKLOG, conn.listener)
                conn.refuse()
                return
            conn.hold()
            gate.waiting.append(conn)
            return
        self._begin(gate, conn, held=False)

    def depart(self, conn: Arrival) -> None:
        """A held connection closed before its turn."""
        gate = self._gates.get(conn.listener)
        if gate is None:
            return
        if gate.head is conn:
            gate.head = None
            self._advance(conn.listener)
        elif conn in gate.waiting:
            gate.waiting.remove(conn)

    def _begin(self, gate: _Gate, conn: Arrival, *, held: bool) -> None:
        """Kafka's waitForConnectionSlot: the connection is recorded in the broker's and listener's
        rates, then waits for their throttle time and for a free slot (max.connections), holding up
        the listener's later arrivals meanwhile."""
        now_ms = monotonic() * 1000
        delay_ms = self._record_listener(conn.listener, now_ms)
        if delay_ms > 0:
            self._throttled("rate", conn.listener, delay_ms, now_ms)
        if delay_ms <= 0 and self._slot_available(conn.listener):
            self._after_wait(conn)
            return
        if not held:
            conn.hold()
        gate.head = conn
        if delay_ms > 0:
            gate.timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._throttle_over, conn.listener)

    def _throttle_over(self, listener: str) -> None:
        self._gates[listener].timer = None
        self._advance(listener)

    def _advance(self, listener: str) -> None:
        """The head goes on once its throttle time has passed and a slot is free; then the next."""
        gate = self._gates[listener]
        if gate.timer is not None:
            return
        head = gate.head
        if head is not None:
            if not self._slot_available(listener):
                return  # a connection closing frees one (release)
            gate.head = None
            self._after_wait(head)
        while gate.waiting and gate.head is None and gate.timer is None:
            self._begin(gate, gate.waiting.popleft(), held=True)

    def _slot_available(self, listener: str) -> bool:
        """Kafka's connectionSlotAvailable: under the listener's max.connections, and under the
        broker's unless this is the inter-broker listener (of several)."""
        if self._by_listener.get(listener, 0) >= self.listener_max(listener):
            return False
        return listener == self.protected or self.total < self.max_connections

    def _after_wait(self, conn: Arrival) -> None:
        now_ms = monotonic() * 1000
        limit = self.ip_rate(conn.peer)
        if limit < UNLIMITED:
            self._sweep(now_ms)
            delay_ms = self._record(f"ip:{conn.peer}", limit, now_ms)
            if delay_ms > 0:
                self._unrecord(conn.listener, conn.peer, now_ms)
                self._throttled("ip", conn.listener, delay_ms, now_ms)
                log.debug("delaying closing of connection from %s for %d ms", conn.peer, delay_ms)
                conn.throttled(delay_ms / 1000)
                return
        if self._count(conn.peer, conn.listener):
            conn.admitted()
        else:
            log.info("Rejected connection from %s, address already has the configured maximum of %d connections.",
                     conn.peer, self.overrides.get(conn.peer, self.per_ip))
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

    def _throttled(self, kind: str, listener: str, delay_ms: int, now_ms: float) -> None:
        average = self._throttles.get((kind, listener))
        if average is None:
            average = self._throttles[(kind, listener)] = ThrottleAverage(THROTTLE_SPAN_MS)
        average.record(delay_ms, now_ms)

    def observed(self) -> tuple[float, dict[str, tuple[float, float, float]]]:
        """For the metrics: the broker's accept rate, and per listener its accept rate and mean
        throttle times (its or the broker's rate, IPs' quotas)."""
        now_ms = monotonic() * 1000
        broker = self._rates.get("")
        listeners = {key.removeprefix("listener:") for key in self._rates if key.startswith("listener:")}
        listeners |= {listener for _, listener in self._throttles}

        def rate(key: str) -> float:
            found = self._rates.get(key)
            return found.per_second(now_ms) if found is not None else 0.0

        def mean(kind: str, listener: str) -> float:
            found = self._throttles.get((kind, listener))
            return found.value(now_ms) if found is not None else 0.0

        return (broker.per_second(now_ms) if broker is not None else 0.0,
                {name: (rate(f"listener:{name}"), mean("rate", name), mean("ip", name)) for name in sorted(listeners)})

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
    def _count(self, address: str, listener: str) -> bool:
        """Count a new connection from ``address``; False (and not counted) over the address's limit."""
        count = self._by_ip.get(address, 0)
        if count >= self.overrides.get(address, self.per_ip):
            return False
        self._by_ip[address] = count + 1
        self._by_listener[listener] = self._by_listener.get(listener, 0) + 1
        self.total += 1
        return True

    def release(self, address: str, listener: str) -> None:
        """An admitted connection closed: a slot is free, for whichever listener waits for one."""
        count = self._by_ip.get(address, 0) - 1
        if count <= 0:
            self._by_ip.pop(address, None)
        else:
            self._by_ip[address] = count
        self._by_listener[listener] = self._by_listener.get(listener, 1) - 1
        self.total -= 1
        self._wake_waiting()


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
