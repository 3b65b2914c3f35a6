"""The group coordinator's home in the broker: ``__consumer_offsets`` as its store.

Commits and group metadata are records in Kafka's key/value format, appended as one batch per call
to the partition ``partition_for(group)`` of the compacted offsets topic; at start-up every
partition is replayed to rebuild groups and offsets.
"""

from __future__ import annotations

from collections.abc import Iterator

from grete.broker.broker import Broker
from grete.broker.config import BrokerConfig, ConfigError
from grete.coordinator.groups.consumer_assignors import ASSIGNORS, TopicView
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_types import GroupConfig
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import ControlType, parse_control_record
from grete.protocol.records.record import Record, decode_records
from grete.protocol.records.record import build_batch as build_record_batch
from grete.protocol.topics import OFFSETS_TOPIC

KeyValue = tuple[bytes, bytes | None]


# How Kafka's group coordinator reports a failed append of its records to clients.
COMMIT_ERRORS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
}


class LogOffsetsStore:
    """``OffsetsStore`` over the broker's own ``__consumer_offsets`` partitions."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._open: dict[int, dict[int, list[KeyValue]]] = {}

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        await self._append(partition, records, -1, -1)

    async def append_txn(self, partition: int, records: list[KeyValue], producer_id: int,
                         producer_epoch: int) -> None:
        await self._append(partition, records, producer_id, producer_epoch)

    async def _append(self, partition: int, records: list[KeyValue], producer_id: int,
                      producer_epoch: int) -> None:
        await self.broker.ensure_offsets_topic()
        now = self.broker.now_ms()
        transactional = producer_id >= 0
        batch = build_record_batch([Record(i, 0, key, value) for i, (key, value) in enumerate(records)],
                                   base_timestamp=now, producer_id=producer_id, producer_epoch=producer_epoch,
                                   base_sequence=-1, transactional=transactional)
        leader = self.broker.partition(OFFSETS_TOPIC, partition)
        result = leader.append(RecordBatch(batch), now)
        if leader.has_followers:
            # As Kafka's coordinator appends: acks=all, and the answer waits for the ISR.
            error = await leader.wait_for_replication(result.last_offset + 1,
                                                      self.broker.config.get_int("offsets.commit.timeout.ms"))
            if error != ErrorCode.NONE:
                raise KafkaError(COMMIT_ERRORS.get(error, error), f"__consumer_offsets-{partition}: {error.name}")

    def read(self, partition: int) -> Iterator[KeyValue]:
        """Committed records in commit order: a transaction's records surface at its COMMIT marker."""
        open_txns: dict[int, list[KeyValue]] = {}
        self._open[partition] = open_txns
        found = self.broker.partitions.get((OFFSETS_TOPIC, partition))
        if found is None:
            return
        for batch in found.coordinator_batches():
            if batch.is_control:
                kind, _ = parse_control_record(batch)
                staged = open_txns.pop(batch.producer_id, [])
                if kind == ControlType.COMMIT:
                    yield from staged
                continue
            records = [(r.key, r.value) for r in decode_records(batch) if r.key is not None]
            if batch.is_transactional:
                open_txns.setdefault(batch.producer_id, []).extend(records)
            else:
                yield from records

    def open_transactions(self, partition: int) -> dict[int, list[KeyValue]]:
        return self._open.pop(partition, {})


def group_config(broker: Broker) -> GroupConfig:
    cfg = broker.config
    check_consumer_group_bounds(cfg)
    return GroupConfig(
        group_min_session_timeout_ms=cfg.get_int("group.min.session.timeout.ms"),
        group_max_session_timeout_ms=cfg.get_int("group.max.session.timeout.ms"),
        group_initial_rebalance_delay_ms=cfg.get_int("group.initial.rebalance.delay.ms"),
        group_max_size=cfg.get_int("group.max.size"),
        offsets_topic_num_partitions=cfg.get_int("offsets.topic.num.partitions"),
        offsets_retention_minutes=cfg.get_int("offsets.retention.minutes"),
        offset_metadata_max_bytes=cfg.get_int("offset.metadata.max.bytes"),
        offsets_retention_check_interval_ms=cfg.get_int("offsets.retention.check.interval.ms"),
        consumer_session_timeout_ms=cfg.get_int("group.consumer.session.timeout.ms"),
        consumer_heartbeat_interval_ms=cfg.get_int("group.consumer.heartbeat.interval.ms"),
        consumer_max_size=cfg.get_int("group.consumer.max.size"),
        consumer_assignors=consumer_assignors(cfg.get_list("group.consumer.assignors")),
        consumer_protocol_enabled="consumer" in cfg.get_list("group.coordinator.rebalance.protocols"),
        consumer_migration_policy=cfg.get_str("group.consumer.migration.policy").lower(),
        streams_session_timeout_ms=cfg.get_int("group.streams.session.timeout.ms"),
        streams_heartbeat_interval_ms=cfg.get_int("group.streams.heartbeat.interval.ms"),
        streams_max_size=cfg.get_int("group.streams.max.size"),
        streams_initial_rebalance_delay_ms=cfg.get_int("group.streams.initial.rebalance.delay.ms"),
        streams_num_standby_replicas=cfg.get_int("group.streams.num.standby.replicas"),
        streams_protocol_enabled="streams" in cfg.get_list("group.coordinator.rebalance.protocols"),
    )


# Kafka's class names for its two server-side assignors, which group.consumer.assignors also takes.
_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def consumer_assignors(names: list[str]) -> tuple[str, ...]:
    assignors = tuple(_ASSIGNOR_CLASSES.get(n, n) for n in names)
    unknown = [n for n in assignors if n not in ASSIGNORS]
    if unknown or not assignors:
        raise ConfigError(f"Invalid value {','.join(names)} for configuration group.consumer.assignors: "
                          f"grete has the assignors {', '.join(ASSIGNORS)}")
    return assignors


def check_consumer_group_bounds(cfg: BrokerConfig) -> None:
    """GroupCoordinatorConfig's start-up checks of the group.consumer.* timeouts."""
    for value, low, high in (("heartbeat.interval.ms", "min.heartbeat.interval.ms", "max.heartbeat.interval.ms"),
                             ("session.timeout.ms", "min.session.timeout.ms", "max.session.timeout.ms")):
        v, lo, hi = (cfg.get_int(f"group.consumer.{k}") for k in (value, low, high))
        if hi < lo:
            raise ConfigError(f"group.consumer.{high} must be greater than or equal to group.consumer.{low}")
        if not lo <= v <= hi:
            raise ConfigError(f"group.consumer.{value} must be between group.consumer.{low} and group.consumer.{high}")
    if cfg.get_int("group.consumer.heartbeat.interval.ms") >= cfg.get_int("group.consumer.session.timeout.ms"):
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")


def topic_view(broker: Broker) -> TopicView:
    """What KIP-848 assignors see: every topic clients may subscribe to, by name, with id and size."""
    return {name: (meta.topic_id, len(meta.partitions)) for name, meta in broker.metadata.topics().items()
            if not meta.internal}


async def start_group_coordinator(broker: Broker) -> GroupCoordinator:
    """The single node leads every __consumer_offsets partition and loads them all now; in a cluster
    each partition loads when LeaderAndIsr makes this broker its leader."""
    coordinator = GroupCoordinator(group_config(broker), LogOffsetsStore(broker), now_ms=broker.now_ms,
                                   topic_view=lambda: topic_view(broker),
                                   group_overrides=lambda group_id: broker.metadata.group_configs(group_id))
    broker.share_groups.attach(coordinator)  # before any load: share groups come back with theirs
    if broker.cluster.replicates:
        coordinator.startup()
    else:
        await coordinator.load()
    return coordinator
