"""Producer ids: handed out from blocks reserved in the metadata store (as Kafka's
AllocateProducerIds does), so an id is never reused, even after a crash: the unused rest of a
block is skipped after a restart.

Reserving a block is a metadata change (asynchronous: a file write here, a ZooKeeper write in a
cluster), while ids are asked for synchronously by the transaction coordinator. So, like Kafka's
``RPCProducerIdManager``, the next block is fetched ahead, once 90 % of the current one is used; an
id asked for while no block is at hand answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
"""

from __future__ import annotations

import asyncio

from grete.coordinator.metadata import MetadataStore
from grete.protocol.errors import ErrorCode, KafkaError

BLOCK_SIZE = 1000
PREFETCH_AT = 0.9


class ProducerIdManager:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._next = 0
        self._end = 0
        self._ahead: asyncio.Task[int] | None = None

    async def start(self, *, lazily: bool = False) -> None:
        """Reserve the first block before any request can ask for an id; ``lazily`` (a cluster
        broker, as Kafka's): only when the first id is asked for, so brokers that never hand one
        out spend none."""
        if lazily:
            return
        self._next = await self._store.allocate_producer_ids(BLOCK_SIZE)
        self._end = self._next + BLOCK_SIZE

    def next_id(self) -> int:
        if self._next >= self._end:
            if self._ahead is None:
                self._ahead = asyncio.ensure_future(self._store.allocate_producer_ids(BLOCK_SIZE))
            self._take_prefetched()
        producer_id = self._next
        self._next += 1
        if self._ahead is None and self._next >= self._end - BLOCK_SIZE * (1 - PREFETCH_AT):
            self._ahead = asyncio.ensure_future(self._store.allocate_producer_ids(BLOCK_SIZE))
        return producer_id

    def _take_prefetched(self) -> None:
        ahead = self._ahead
        if ahead is None or not ahead.done():
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the next producer id block is not ready yet")
        self._ahead = None
        self._next = ahead.result()
        self._end = self._next + BLOCK_SIZE

    def stop(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
