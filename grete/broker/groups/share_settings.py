"""Share groups' settings: the group's override (ConfigResource GROUP) or the broker's key."""

from __future__ import annotations

import time

from grete.broker.config import BrokerConfig
from grete.broker.replica.partition import Partition
from grete.coordinator.metadata import MetadataStore
from grete.coordinator.share.share_reset import BY_DURATION, EARLIEST, LATEST, parse_reset


def now_ms() -> int:
    return int(time.time() * 1000)


class ShareSettings:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.config = config
        self.metadata = metadata

    def group_int(self, group_id: str, group_key: str, broker_key: str) -> int:
        value = self.metadata.group_configs(group_id).get(group_key)
        return int(value) if value is not None else self.config.get_int(broker_key)

    def lock_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.record.lock.duration.ms", "group.share.record.lock.duration.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms")

    def session_timeout_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.session.timeout.ms", "group.share.session.timeout.ms")

    def read_committed(self, group_id: str) -> bool:
        """share.isolation.level (KIP-932): read_committed acquires up to the last stable offset and
        archives the records of aborted transactions instead of delivering them."""
        level = self.metadata.group_configs(group_id).get(
            "share.isolation.level", self.config.get_str("share.isolation.level"))
        return level == "read_committed"

    def initial_offset(self, group_id: str, partition: Partition) -> int:
        """share.auto.offset.reset: where a share partition starts the first time it is fetched; with
        by_duration, the first record whose timestamp is no older than the duration (else the end)."""
        value = self.metadata.group_configs(group_id).get(
            "share.auto.offset.reset", self.config.get_str("share.auto.offset.reset"))
        strategy, ms = parse_reset(value) or (LATEST, 0)
        if strategy == EARLIEST:
            return partition.log_start_offset
        if strategy == BY_DURATION:
            found = partition.offset_for_timestamp(now_ms() - ms)
            if found is not None:
                return max(partition.log_start_offset, min(found[0], partition.high_watermark))
        return partition.high_watermark
