"""Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager: one quota for the bytes a
broker sends as leader to its followers, one for the bytes it fetches as a follower.

A partition is throttled on this broker, for a side, when its topic's
``<side>.replication.throttled.replicas`` names it with this broker's id (``<partition>:<broker>,...``)
or is ``*``: ``kafka-reassign-partitions --throttle`` sets the leader side for a reassignment's
existing replicas and the follower side for the ones it adds. While the bytes this broker moved for
throttled partitions on that side, measured over ``replication.quota.window.num`` windows of
``replication.quota.window.size.seconds``, exceed its ``<side>.replication.throttled.rate``, a
replica that has not caught up is held back: the follower's fetchers leave its partitions out, the
leader answers its fetches for them with no records (an in-sync replica never is, as in Kafka).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from grete.broker.config import BrokerConfig
from grete.broker.quotas.client_quotas import Rate

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


class MeasuredRate:
    """Bytes a second over the replication quota's windows, against the limit a broker config gives
    (Long.MAX_VALUE, the default: never exceeded)."""

    def __init__(self, config: BrokerConfig, rate_key: str) -> None:
        self._config = config
        self._rate_key = rate_key
        self._sensor: Rate | None = None

    def exceeded(self, now_ms: float | None = None) -> bool:
        limit = self._config.get_int(self._rate_key)
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


def alter_log_dirs_quota(config: BrokerConfig) -> MeasuredRate:
    """``replica.alter.log.dirs.io.max.bytes.per.second``: what moves between a broker's own log dirs
    (AlterReplicaLogDirs) copy, all of them together (Kafka's alter-log-dirs quota)."""
    return MeasuredRate(config, "replica.alter.log.dirs.io.max.bytes.per.second")


class ReplicationQuota(MeasuredRate):
    def __init__(self, broker_id: int, config: BrokerConfig, topic_configs: TopicConfigs, side: str) -> None:
        """``side``: "leader" or "follower"."""
        super().__init__(config, f"{side}.replication.throttled.rate")
        self._replicas_key = f"{side}.replication.throttled.replicas"
        self._broker_id = broker_id
        self._topic_configs = topic_configs
        self._parsed: dict[tuple[str, str], frozenset[int]] = {}

    def throttled(self, topic: str, index: int) -> bool:
        configs = self._topic_configs(topic)
        value = configs.get(self._replicas_key, "") if configs is not None else ""
        if not value:
            return False
        partitions = self._parsed.get((topic, value))
        if partitions is None:
            if len(self._parsed) >= CACHED_TOPICS:
                self._parsed.clear()
            partitions = self._parsed[(topic, value)] = throttled_partitions(value, self._broker_id)
        return partitions is ALL or index in partitions
