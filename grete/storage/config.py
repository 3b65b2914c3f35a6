"""Topic-level log configuration: Kafka's config names in snake case, with Kafka's defaults."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from grete.protocol.errors import ErrorCode, KafkaError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
# Kafka 3.9's topic config (a broker of a ZooKeeper cluster), removed in Kafka 4 (KIP-937).
TIMESTAMP_DIFFERENCE: Final = "message.timestamp.difference.max.ms"


@dataclass(frozen=True)
class LogConfig:
    """Settings one partition's log obeys; replaceable while the log is open (``Log.update_config``).

    Field names are Kafka's topic config keys with dots turned into underscores
    (``segment.bytes`` -> ``segment_bytes``); ``from_kafka`` parses the dotted form.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    preallocate: bool = False
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    compression_type: str = "producer"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    producer_id_expiration_ms: int = 86400000  # broker-level in Kafka; kept here so a log is self-contained

    @property
    def compact(self) -> bool:
        return "compact" in self.policies

    @property
    def delete(self) -> bool:
        return "delete" in self.policies

    @functools.cached_property
    def policies(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kafka(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Parse Kafka-style dotted keys over ``base`` (default: Kafka defaults).

        Unknown keys are ignored (the broker validates names against its own table); bad values
        raise KafkaError(INVALID_CONFIG) so CreateTopics/AlterConfigs can answer with it.
        """
        start = base if base is not None else cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            name = key.replace(".", "_")
            field = fields.get(name)
            if field is None:
                continue
            changes[name] = _parse(key, raw, type(getattr(start, name)))
        difference = props.get(TIMESTAMP_DIFFERENCE)
        if difference is not None:
            # Kafka 3.9's LogConfig: the difference bounds each side whose own bound is unset.
            bound = _parse(TIMESTAMP_DIFFERENCE, difference, int)
            for name in ("message_timestamp_before_max_ms", "message_timestamp_after_max_ms"):
                if changes.get(name, getattr(start, name)) == LONG_MAX:
                    changes[name] = bound
        cfg = dataclasses.replace(start, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.segment_bytes < 14:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "segment.bytes must be at least 14")
        if self.segment_index_bytes < 8:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "segment.index.bytes must be at least 8")
        # An empty policy is legal (Kafka 3.9 and 4.3 accept it): neither retention nor compaction.
        if not self.policies <= {"compact", "delete"}:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"bad cleanup.policy {self.cleanup_policy!r}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"bad message.timestamp.type {self.message_timestamp_type!r}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "min.cleanable.dirty.ratio must be in [0, 1]")


def _parse(key: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            lowered = str(raw).strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(raw)
            return lowered == "true"
        if kind is int:
            return int(str(raw).strip())
        if kind is float:
            return float(str(raw).strip())
        return str(raw).strip()
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}") from None
