"""Client telemetry (KIP-714) as a broker with no client-metrics subscriptions keeps it.

Kafka 4.3.1 answers GetTelemetrySubscriptions and PushTelemetry even when it does not advertise
them (no client-telemetry metrics reporter configured): every client instance gets the default
subscription (no metrics requested, a five-minute push interval) and pushed metrics go nowhere.
What the client can observe is kept as Kafka keeps it, per client instance:

* a zero instance id gets a fresh random one; the subscription id is Kafka's, the CRC32C of the
  subscription (``"[]300000"``) XOR the instance id's Java hashCode;
* a Get sooner than the push interval after the last Get or push is THROTTLING_QUOTA_EXCEEDED
  (unless the last error was UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE); a push sooner
  than the interval after the last push too, except the first push after a Get and a terminating one;
* a push after a terminating one, or for a reserved instance id, is INVALID_REQUEST; a wrong
  subscription id UNKNOWN_SUBSCRIPTION_ID; an unknown compression id UNSUPPORTED_COMPRESSION_TYPE;
  metrics over ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE;
* an instance is forgotten when the connection that created it closes, after
  max(60 s, 3 push intervals) without requests, or when 16384 newer ones push it out.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass

import crc32c

from grete.protocol.errors import ErrorCode, KafkaError

PUSH_INTERVAL_MS = 300_000          # Kafka's ClientMetricsConfigs.INTERVAL_MS_DEFAULT
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy: Kafka's order of preference
CACHE_MAX_SIZE = 16384
CACHE_EXPIRY_MS = 60_000
_COMPRESSION_IDS = range(5)          # none, gzip, snappy, lz4, zstd
_RESERVED = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})  # Kafka's Uuid.RESERVED


@dataclass(slots=True)
class ClientInstance:
    subscription_id: int
    connection: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    touched_ms: int = 0


def subscription_id(instance_id: uuid.UUID, metrics: str = "[]", push_interval_ms: int = PUSH_INTERVAL_MS) -> int:
    """Kafka's ClientMetricsManager.computeSubscriptionId, bit for bit."""
    crc = crc32c.crc32c(f"{metrics}{push_interval_ms}".encode())
    most, least = struct.unpack(">qq", instance_id.bytes)
    hilo = most ^ least
    return _int32(_int32(crc) ^ _int32(hilo >> 32) ^ _int32(hilo))


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class ClientTelemetry:
    """The broker's client instances; the two telemetry handlers are its only callers."""

    def __init__(self) -> None:
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self._by_connection: dict[int, uuid.UUID] = {}

    def get_subscription(self, connection: int, instance_id: uuid.UUID) -> tuple[uuid.UUID, ClientInstance]:
        """GetTelemetrySubscriptions: the instance (a new id for a zero one); raises KafkaError."""
        now = _now_ms()
        if instance_id.int == 0:
            instance_id = self._new_id()
        instance = self._instance(connection, instance_id, now)
        if now - max(instance.last_get_ms, instance.last_push_ms) >= PUSH_INTERVAL_MS:
            instance.last_get_ms = now
        elif instance.last_error not in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"Request from the client [{instance_id}] arrived "
                             "before the next push interval time")
        instance.last_error = ErrorCode.NONE
        return instance_id, instance

    def push(self, connection: int, instance_id: uuid.UUID, subscription: int, terminating: bool,
             compression_type: int, size: int, max_bytes: int) -> None:
        """PushTelemetry: checked as Kafka checks it, then dropped (no exporter); raises KafkaError."""
        if instance_id in _RESERVED:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid request from the client [{instance_id}], "
                                                        "invalid client instance id")
        now = _now_ms()
        instance = self._instance(connection, instance_id, now)
        try:
            self._check_push(instance, instance_id, now, subscription, terminating, compression_type, size, max_bytes)
        except KafkaError as exc:
            instance.last_error = exc.code
            raise
        finally:
            instance.terminating = terminating
        instance.last_error = ErrorCode.NONE

    def connection_closed(self, connection: int) -> None:
        instance_id = self._by_connection.pop(connection, None)
        if instance_id is not None:
            self._instances.pop(instance_id, None)

    # --- internals ---------------------------------------------------------------------------------
    @staticmethod
    def _check_push(instance: ClientInstance, instance_id: uuid.UUID, now: int, subscription: int,
                    terminating: bool, compression_type: int, size: int, max_bytes: int) -> None:
        if instance.terminating:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Client [{instance_id}] sent the previous request with "
                             "state terminating to TRUE, can not acceptany requests after that")
        # The first push after a Get is taken early: clients jitter the interval.
        if instance.last_get_ms > instance.last_push_ms or now - instance.last_push_ms >= PUSH_INTERVAL_MS:
            instance.last_push_ms = now
        elif not terminating:
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"Request from the client [{instance_id}] arrived "
                             "before the next push interval time")
        if subscription != instance.subscription_id:
            raise KafkaError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                             f"Unknown client subscription id for the client [{instance_id}]")
        if compression_type not in _COMPRESSION_IDS:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type "
                             f"[{compression_type}] is received in telemetry request from [{instance_id}]")
        if size > max_bytes:
            raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry request from [{instance_id}] is larger "
                             f"than the maximum allowed size [{max_bytes}]")

    def _instance(self, connection: int, instance_id: uuid.UUID, now: int) -> ClientInstance:
        self._expire(now)
        instance = self._instances.get(instance_id)
        if instance is None:
            instance = ClientInstance(subscription_id(instance_id), connection)
            self._instances[instance_id] = instance
            self._by_connection[connection] = instance_id
            while len(self._instances) > CACHE_MAX_SIZE:
                evicted, old = self._instances.popitem(last=False)
                if self._by_connection.get(old.connection) == evicted:
                    del self._by_connection[old.connection]
        self._instances.move_to_end(instance_id)
        instance.touched_ms = now
        return instance

    def _expire(self, now: int) -> None:
        """Drop instances idle longer than Kafka's expiry (the least recently used come first)."""
        expiry = max(CACHE_EXPIRY_MS, 3 * PUSH_INTERVAL_MS)
        while self._instances:
            oldest_id, oldest = next(iter(self._instances.items()))
            if now - oldest.touched_ms < expiry:
                return
            if self._by_connection.get(oldest.connection) == oldest_id:
                del self._by_connection[oldest.connection]
            del self._instances[oldest_id]

    def _new_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.uuid4()
            if candidate not in self._instances and candidate not in _RESERVED:
                return candidate


def _now_ms() -> int:
    return int(time.time() * 1000)
