"""A KRaft node's metadata image to and from a snapshot of the metadata log.

A snapshot holds the records that rebuild the image at its end offset, in the order Kafka's image
writer puts them: the finalized features (metadata.version first), the brokers' and controllers'
registrations, then topics with their partitions and configs, credentials, ACLs, quotas, tokens and
the next producer id. Every node writes its own from what it has applied (grete/broker/quorum/driver.py
decides when), and loads its own at start or its leader's after a FetchSnapshot: the records then
replace the image rather than add to it.
"""

from __future__ import annotations

from grete.broker.quorum.brokers import Registrations
from grete.broker.quorum.reassignments import ReassignmentLists
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.protocol.codec import Message
from grete.protocol.metadata import FeatureLevelRecord, PartitionRecord


def snapshot_records(store: QuorumMetadataStore, registrations: Registrations,
                     reassigning: ReassignmentLists | None = None) -> list[Message]:
    """The image as a snapshot's records (new objects: the image may move on while they are written)."""
    def complete(record: PartitionRecord) -> None:
        store.partition_record(record)
        if reassigning is not None:
            reassigning.partition_record(record)
    records = store.state_records(complete)
    features = 0
    while features < len(records) and isinstance(records[features], FeatureLevelRecord):
        features += 1
    return [*records[:features], *registrations.records(), *records[features:]]


def load_snapshot(store: QuorumMetadataStore, registrations: Registrations, end_offset: int, values: list[bytes],
                  reassigning: ReassignmentLists | None = None) -> list[tuple[Message, int]]:
    """Replace the image by a snapshot's records; the records applied, with their offset."""
    registrations.reset()
    if reassigning is not None:
        reassigning.reset()
    applied = store.load_snapshot(end_offset, values)
    for record, offset in applied:
        registrations.apply(record, offset)
        if reassigning is not None:
            reassigning.applied(record)
    return applied
