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
from grete.coordinator.metadata import METADATA_FILE, LocalMetadataStore, new_topic_id
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.files import (
    META_PROPERTIES,
    read_properties,
    uuid_from_kafka,
    uuid_to_kafka,
    write_properties,
)

log = logging.getLogger(__name__)

IMPORTED_SUFFIX = ".imported"


def format_if_needed(directory: Path, node_id: int, cluster_id: str | None = None) -> tuple[str, uuid.UUID]:
    """(cluster id, directory id) from ``meta.properties``, written first if the dir has none (or
    has ZooKeeper mode's version 0, which carries no directory id)."""
    path = directory / META_PROPERTIES
    props = read_properties(path) or {}
    stored_node = props.get("node.id", props.get("broker.id"))
    if stored_node is not None and stored_node != str(node_id):
        # Kafka's MetaPropertiesEnsemble check: a dir belongs to one node.
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: node.id {stored_node} does not match {node_id}")
    if props.get("version") == "1" and props.get("cluster.id") and props.get("directory.id"):
        return props["cluster.id"], uuid_from_kafka(props["directory.id"])
    legacy = directory / METADATA_FILE
    found = props.get("cluster.id") or (LocalMetadataStore(directory).cluster_id if legacy.exists() else None)
    chosen = found or cluster_id or uuid_to_kafka(new_topic_id())
    directory_id = new_topic_id()
    directory.mkdir(parents=True, exist_ok=True)
    write_properties(path, {"cluster.id": chosen, "directory.id": uuid_to_kafka(directory_id),
                            "node.id": str(node_id), "version": "1"})
    log.info("formatted %s for a KRaft quorum of one: cluster id %s, node %d", directory, chosen, node_id)
    return chosen, directory_id


def open_local_store(directory: Path, node_id: int, cluster_id: str | None = None, *,
                     snapshot_bytes: int = SNAPSHOT_BYTES) -> KRaftMetadataStore:
    """The metadata store of a node that is its own quorum, its log replayed and a new epoch begun."""
    found_cluster, directory_id = format_if_needed(directory, node_id, cluster_id)
    quorum = SingleVoterQuorum(directory, node_id, directory_id, snapshot_bytes=snapshot_bytes)
    store = KRaftMetadataStore(quorum, found_cluster)
    legacy = directory / METADATA_FILE
    if legacy.exists():
        if store.records_applied == 0:
            store.import_state(LocalMetadataStore(directory))
            log.info("metadata of %s now lives in the metadata log (%d records)", legacy, store.records_applied)
        legacy.rename(legacy.with_name(legacy.name + IMPORTED_SUFFIX))
    return store
