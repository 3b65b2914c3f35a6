"""Replication throttles (KIP-73), the follower's side, as Kafka's ReplicationQuotaManager for
``follower.replication.throttled.rate``.

A partition is throttled on this broker when its topic's ``follower.replication.throttled.replicas``
names it with this broker's id (``<partition>:<broker>,...``) or is ``*``: what
``kafka-reassign-partitions --throttle`` sets for the replicas a reassignment adds. While the bytes
this broker fetched for throttled partitions, measured over ``replication.quota.window.num``
windows of ``replication.quota.window.size.seconds``, exceed the broker's
``follower.replication.throttled.rate``, its fetchers leave out the throttled partitions that have
not caught up with their leader (an in-sync replica is never held back, as in Kafka).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from grete.broker.config import BrokerConfig
from grete.broker.quotas.client_quotas import Rate

THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
RATE = "follower.replication.throttled.rate"
UNLIMITED = 2**63 - 1  # the rate's default, Long.MAX_VALUE: not throttled
ALL = frozenset({-1})  # "*": every partition of the topic
CACHED_TOPICS = 1024

TopicConfigs = Callable[[str], Mapping[str, str] | None]


def throttled_partitions(value: str, broker_id: int) -> frozenset[int]:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``broker_id``
    (:data:`ALL` for ``*``; Kafka's parseThrottledPartitions)."""
    value = value.strip()
    if value == "*":
        return ALL
    found = set()
    for entry in value.split(","):
        partition, _, broker = entry.strip().partition(":")
        if broker.strip().isdigit() and int(broker) == broker_id and partition.strip().isdigit():
            found.add(int(partition))
    return frozenset(found)


class FollowerQuota:
    def __init__(self, broker_id: int, config: BrokerConfig, topic_configs: TopicConfigs) -> None:
        self._broker_id = broker_id
        self._config = config
        self._topic_configs = topic_configs
        self._parsed: dict[tuple[str, str], frozenset[int]] = {}
        self._sensor: Rate | None = None

    def throttled(self, topic: str, index: int) -> bool:
        configs = self._topic_configs(topic)
        value = configs.get(THROTTLED_REPLICAS, "") if configs is not None else ""
        if not value:
            return False
        partitions = self._parsed.get((topic, value))
        if partitions is None:
            if len(self._parsed) >= CACHED_TOPICS:
                self._parsed.clear()
            partitions = self._parsed[(topic, value)] = throttled_partitions(value, self._broker_id)
        return partitions is ALL or index in partitions

    def exceeded(self, now_ms: float | None = None) -> bool:
        """The throttled partitions' fetched bytes are above the rate (never while it is unlimited)."""
        limit = self._config.get_int(RATE)
        if limit >= UNLIMITED or self._sensor is None:
            return False
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        return self._sensor.per_second(now) > limit

    def record(self, size: int, now_ms: float | None = None) -> None:
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        if self._sensor is None:
            self._sensor = Rate(self._config.get_int("replication.quota.window.num"),
                                self._config.get_int("replication.quota.window.size.seconds") * 1000, now)
        self._sensor.record(size, now)
