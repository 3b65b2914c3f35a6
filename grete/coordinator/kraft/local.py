"""The embedded node's metadata: a KRaft quorum of one in its first log dir, formatted on first start.

Kafka 4 wants ``kafka-storage format`` before a first start; the embedded node does it itself
(Kafka's ``--standalone``: this node the only voter) so ``grete serve`` needs no set-up:
``meta.properties`` version 1 with a cluster id, the node id and the directory id, then the
metadata log. A data dir written by a grete that kept its metadata in ``grete-metadata.json`` is
taken over once: its cluster id is kept and its contents become the log's first records; the file
is then renamed ``grete-metadata.json.imported`` (left, not deleted, for an operator to inspect).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from grete.coordinator.kraft.quorum import SNAPSHOT_BYTES, SingleVoterQuorum
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.coordinator.metadata import METADATA_FILE, LegacyMetadataFile, new_topic_id
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata_frame import decode_metadata_record
from grete.storage.checkpoint_file import BOOTSTRAP_CHECKPOINT, CheckpointError, read_checkpoint
from grete.storage.files import META_PROPERTIES, uuid_to_kafka
from grete.storage.manager import mismatched_node_id
from grete.storage.meta_properties import (
    V1,
    MetaProperties,
    MetaPropertiesError,
    new_directory_id,
    read_meta_properties,
    write_meta_properties,
)

log = logging.getLogger(__name__)

IMPORTED_SUFFIX = ".imported"


def format_if_needed(directory: Path, node_id: int, cluster_id: str | None = None) -> tuple[str, uuid.UUID]:
    """(cluster id, directory id) from ``meta.properties``, written first (as ``kafka-storage
    format`` writes it) if the dir has none, or has ZooKeeper mode's version 0 without a directory id."""
    try:
        meta = read_meta_properties(directory)
    except MetaPropertiesError as exc:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
    if meta is not None and meta.node_id is not None and meta.node_id != node_id:
        # Kafka's MetaPropertiesEnsemble check: a dir belongs to one node.
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, mismatched_node_id(directory / META_PROPERTIES, meta.node_id,
                                                                            node_id))
    if meta is not None and meta.version == V1 and meta.cluster_id and meta.directory_id is not None:
        return meta.cluster_id, meta.directory_id
    legacy = directory / METADATA_FILE
    found = (meta.cluster_id if meta is not None else None) or (
        _legacy(directory).cluster_id if legacy.exists() else None)
    chosen = found or cluster_id or uuid_to_kafka(new_topic_id())
    directory_id = new_directory_id()
    directory.mkdir(parents=True, exist_ok=True)
    write_meta_properties(directory, MetaProperties(V1, chosen, node_id, directory_id))
    log.info("formatted %s for a KRaft quorum of one: cluster id %s, node %d", directory, chosen, node_id)
    return chosen, directory_id


def _legacy(directory: Path) -> LegacyMetadataFile:
    """The old JSON file, read; one that cannot be read stops the start naming it (nothing is taken over)."""
    try:
        return LegacyMetadataFile(directory)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                         f"{directory / METADATA_FILE}: cannot be read to take it over: {exc!r}") from None


def _bootstrap(store: KRaftMetadataStore, path: Path) -> None:
    """A formatted dir's first start: the records ``format`` left in ``bootstrap.checkpoint`` (feature
    levels, --add-scram credentials) become the log's first, as Kafka's first active controller
    writes them."""
    try:
        values = read_checkpoint(path).values
    except (CheckpointError, OSError) as exc:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: {exc}") from None
    store.import_records([decode_metadata_record(value)[0] for value in values])
    log.info("bootstrapped the metadata log from %s (%d records)", path, len(values))


def open_local_store(directory: Path, node_id: int, cluster_id: str | None = None, *,
                     snapshot_bytes: int = SNAPSHOT_BYTES) -> KRaftMetadataStore:
    """The metadata store of a node that is its own quorum, its log replayed and a new epoch begun."""
    found_cluster, directory_id = format_if_needed(directory, node_id, cluster_id)
    quorum = SingleVoterQuorum(directory, node_id, directory_id, snapshot_bytes=snapshot_bytes)
    store = KRaftMetadataStore(quorum, found_cluster)
    bootstrap = directory / BOOTSTRAP_CHECKPOINT
    if store.records_applied == 0 and bootstrap.exists():
        _bootstrap(store, bootstrap)
    legacy = directory / METADATA_FILE
    if legacy.exists():
        if store.records_applied == 0:
            store.import_state(_legacy(directory))
            log.info("metadata of %s now lives in the metadata log (%d records)", legacy, store.records_applied)
        legacy.rename(legacy.with_name(legacy.name + IMPORTED_SUFFIX))
    return store
