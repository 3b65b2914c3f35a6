"""Producer ids: handed out from blocks reserved in the metadata store (as Kafka's
AllocateProducerIds does), so an id is never reused, even after a crash: the unused rest of a
block is skipped after a restart."""

from __future__ import annotations

from grete.coordinator.metadata import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        if self._next >= self._end:
            self._next = self._store.allocate_producer_ids(BLOCK_SIZE)
            self._end = self._next + BLOCK_SIZE
        producer_id = self._next
        self._next += 1
        return producer_id
