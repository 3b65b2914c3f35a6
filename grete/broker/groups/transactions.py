"""The transaction coordinator's home in the broker: ``__transaction_state`` and marker writing.

The state topic is created on first use (FindCoordinator or InitProducerId with a transactional id),
with Kafka's settings for it. Markers go straight to the local partitions; a marker on a
``__consumer_offsets`` partition also tells the group coordinator to apply or drop the offsets the
transaction committed there.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Iterator

from grete.broker.broker import Broker
from grete.broker.replica.partition import Partition
from grete.broker.requests.services import Transactions
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.transactions.txn import MarkerWriter, TransactionCoordinator
from grete.coordinator.transactions.txn_commit import FENCED_MARKER
from grete.coordinator.transactions.txn_state import TopicPartition, TxnConfig
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)


async def ensure_transaction_state_topic(broker: Transactions) -> TopicMeta:
    cfg = broker.config
    return await broker.ensure_internal_topic(TRANSACTION_STATE_TOPIC, cfg.get_int("transaction.state.log.num.partitions"), {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(cfg.get_int("transaction.state.log.segment.bytes")),
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(cfg.get_int("transaction.state.log.min.isr")),
    }, replication_key="transaction.state.log.replication.factor")


class LogTxnStore:
    """``TxnStore`` over the broker's own ``__transaction_state`` partitions."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        # The topic exists: FindCoordinator and InitProducerId create it before any transaction
        # reaches the coordinator (a missing partition answers UNKNOWN_TOPIC_OR_PARTITION).
        now = self.broker.now_ms()
        batch = build_batch([Record(0, 0, key, value)], base_timestamp=now)
        self.broker.partition(TRANSACTION_STATE_TOPIC, partition).append(RecordBatch(batch), now)

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        found = self.broker.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        if found is None:
            return
        for batch in found.coordinator_batches():
            if not batch.is_control:
                for record in decode_records(batch):
                    if record.key is not None:
                        yield record.key, record.value

    def coordinator_epoch(self, partition: int) -> int:
        found = self.broker.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        return found.leader_epoch if found is not None else 0


class LocalMarkerWriter:
    """Writes COMMIT/ABORT markers to partitions this broker leads (all of them, on one node)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *, transaction_version: int = 0) -> None:
        self.append_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions,
                            transaction_version=transaction_version)

    def append_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: Iterable[TopicPartition], *, transaction_version: int = 0,
                       refused: dict[TopicPartition, ErrorCode] | None = None) -> list[tuple[Partition, int]]:
        """Append the markers here; (partition, offset after its marker) for each written, and in
        ``refused`` the error of each its partition refused."""
        now = self.broker.now_ms()
        written = []
        for topic, index in sorted(partitions):
            partition = self.broker.partitions.get((topic, index))
            if partition is None:
                continue  # deleted since it joined the transaction: nothing left to mark
            marker = build_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, now)
            try:
                result = partition.append(RecordBatch(marker), now, transaction_version=transaction_version)
            except KafkaError as exc:
                level = logging.INFO if exc.code in FENCED_MARKER else logging.ERROR
                log.log(level, "could not write the %s marker of producer %d to %s-%d: %s",
                        "COMMIT" if commit else "ABORT", producer_id, topic, index, exc)
                if refused is not None:
                    refused[(topic, index)] = exc.code
                continue
            written.append((partition, result.last_offset + 1))
            groups = self.broker.coordinators()[0]
            if topic == OFFSETS_TOPIC and groups is not None:
                groups.complete_txn(index, producer_id, commit)
        return written


def txn_config(broker: Broker) -> TxnConfig:
    cfg = broker.config
    return TxnConfig(
        num_partitions=cfg.get_int("transaction.state.log.num.partitions"),
        max_timeout_ms=cfg.get_int("transaction.max.timeout.ms"),
        id_expiration_ms=cfg.get_int("transactional.id.expiration.ms"),
        abort_check_interval_ms=cfg.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
        remove_expired_interval_ms=cfg.get_int("transaction.remove.expired.transaction.cleanup.interval.ms"),
        verify_partitions=cfg.get_bool("transaction.partition.verification.enable"),
    )


def start_txn_coordinator(broker: Broker, listener: str = "PLAINTEXT") -> TransactionCoordinator:
    """``listener``: where a cluster's leaders are reached for the markers of partitions led elsewhere."""
    local = LocalMarkerWriter(broker)
    markers: MarkerWriter = local
    if broker.cluster.replicates:
        # Loaded by name and only in a cluster, as the ZooKeeper broker is: a single node neither
        # writes markers to other brokers nor asks them to verify (nor imports those codecs).
        markers = importlib.import_module("grete.broker.cluster.markers").ClusterMarkerWriter(broker, local, listener)
        broker.txn_verifier = importlib.import_module("grete.broker.cluster.txn_verifier").ClusterTxnVerifier(
            broker, listener)
    coordinator = TransactionCoordinator(txn_config(broker), LogTxnStore(broker), markers,
                                         broker.producer_ids.next_id, now_ms=broker.now_ms)
    if not broker.cluster.replicates:
        coordinator.load()  # a cluster broker loads a partition when it becomes its leader
    else:
        coordinator.startup()
    return coordinator


def fenced_error(error: ErrorCode, version: int, first_version_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED is new in each transactional API at some version; older clients get
    INVALID_PRODUCER_EPOCH for the same condition, as Kafka answers them."""
    if error is ErrorCode.PRODUCER_FENCED and version < first_version_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
