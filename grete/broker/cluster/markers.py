"""Transaction markers in a cluster (Kafka's TransactionMarkerChannelManager): the coordinator writes
COMMIT/ABORT markers itself to the partitions this broker leads, and sends WriteTxnMarkers (v1, as
Kafka 3.9 does; v2 with the transaction version for transaction version 2, KIP-1228) to the leaders
of the others, again and again until each has written its marker or its topic is gone. The
transaction completes when the last one has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from grete.broker.broker import Broker
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.replica.partition import Partition
from grete.coordinator.transactions.txn_commit import FENCED_MARKER
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
TV2_WRITE_TXN_MARKERS_VERSION = 2
RETRY_BACKOFF_S = 0.1
MARKER_TIMEOUT_MS = 30_000
TopicPartition = tuple[str, int]
# (producer id, producer epoch, commit, coordinator epoch, transaction version)
Marker = tuple[int, int, bool, int, int]
# Refusals a marker is sent again after (to the partition's leader of the moment); any other is final.
RETRIED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                     ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                     ErrorCode.KAFKA_STORAGE_ERROR})


class LocalMarkers(Protocol):
    """The markers this broker writes itself (``transactions.LocalMarkerWriter``)."""

    def append_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: Iterable[TopicPartition], *, transaction_version: int = 0,
                       refused: dict[TopicPartition, ErrorCode] | None = None) -> list[tuple[Partition, int]]: ...


class ClusterMarkerWriter:
    def __init__(self, broker: Broker, local: LocalMarkers, listener: str) -> None:
        self.broker = broker
        self.local = local
        self.listener = listener
        self._peers: dict[int, PeerConnection] = {}

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *,
                      transaction_version: int = 0) -> asyncio.Future[None] | None:
        mine, theirs = self._split(partitions)
        written = self.local.append_markers(producer_id, producer_epoch, commit, coordinator_epoch, mine,
                                            transaction_version=transaction_version)
        # Kafka writes markers with acks=all: the transaction completes only once they are on
        # their ISRs, so no leader change can lose one behind a CompleteCommit.
        replicating = [(p, offset) for p, offset in written if p.has_followers]
        if not theirs and not replicating:
            return None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        marker = (producer_id, producer_epoch, commit, coordinator_epoch, transaction_version)
        asyncio.ensure_future(self._complete(marker, replicating, set(theirs), done))
        return done

    async def _complete(self, marker: Marker, replicating: list[tuple[Partition, int]],
                        theirs: set[TopicPartition], done: asyncio.Future[None]) -> None:
        pending = set(theirs)
        for partition, offset in replicating:
            outcome = await partition.wait_for_replication(offset, MARKER_TIMEOUT_MS)
            if outcome != ErrorCode.NONE:
                # Not on the ISR (leadership moved, ISR too small): send it to whoever leads now.
                log.info("marker on %s-%d not replicated (%s); writing it again", partition.topic,
                         partition.index, outcome.name)
                pending.add((partition.topic, partition.index))
        await self._send_until_written(marker, pending, done)

    def _split(self, partitions: Iterable[TopicPartition]) -> tuple[list[TopicPartition], list[TopicPartition]]:
        mine: list[TopicPartition] = []
        theirs: list[TopicPartition] = []
        for tp in partitions:
            hosted = self.broker.partitions.get(tp)
            (mine if hosted is not None and hosted.is_leader else theirs).append(tp)
        return mine, theirs

    async def _send_until_written(self, marker: Marker, pending: set[TopicPartition],
                                  done: asyncio.Future[None]) -> None:
        producer_id, producer_epoch, commit, coordinator_epoch, transaction_version = marker
        while pending:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                meta = self.broker.metadata.topic(tp[0])
                if meta is None or tp[1] not in meta.partitions:
                    pending.discard(tp)  # deleted: nothing left to mark
                    continue
                by_leader.setdefault(meta.partitions[tp[1]].leader, []).append(tp)
            for leader, tps in by_leader.items():
                if leader == self.broker.node_id:  # leadership came here meanwhile
                    mine, _ = self._split(tps)
                    refused: dict[TopicPartition, ErrorCode] = {}
                    for partition, offset in self.local.append_markers(
                            producer_id, producer_epoch, commit, coordinator_epoch, mine,
                            transaction_version=transaction_version, refused=refused):
                        if await partition.wait_for_replication(offset, MARKER_TIMEOUT_MS) == ErrorCode.NONE:
                            pending.discard((partition.topic, partition.index))
                    # As a refusal from another broker: given up, not written again and again.
                    pending.difference_update(tp for tp, code in refused.items() if code not in RETRIED)
                    continue
                written = await self._send(leader, marker, tps)
                pending.difference_update(written)
            if pending:
                await asyncio.sleep(RETRY_BACKOFF_S)
        if not done.done():
            done.set_result(None)

    async def _send(self, leader: int, marker: Marker, tps: list[TopicPartition]) -> list[TopicPartition]:
        """The partitions whose leader wrote the marker (or no longer has the topic)."""
        endpoint = self.broker.broker_endpoint(leader, self.listener)
        if endpoint is None:
            return []  # no leader now: wait for one
        peer = self._peers.get(leader)
        if peer is None or (peer.host, peer.port) != (endpoint.host, endpoint.port):
            peer = self._peers[leader] = PeerConnection(endpoint.host, endpoint.port,
                                                        f"txn-markers-{self.broker.node_id}")
        producer_id, producer_epoch, commit, coordinator_epoch, transaction_version = marker
        topics: dict[str, list[int]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append(index)
        request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()])])
        version = TV2_WRITE_TXN_MARKERS_VERSION if transaction_version >= 2 else WRITE_TXN_MARKERS_VERSION
        try:
            response: WriteTxnMarkersResponse = await peer.call(request, version)
        except PeerError as exc:
            log.info("markers of producer %d to broker %d: %s", producer_id, leader, exc)
            return []
        written: list[TopicPartition] = []
        for result in response.markers:
            for answered in result.topics:
                for p in answered.partitions:
                    if p.error_code == ErrorCode.NONE:
                        written.append((answered.name, p.partition_index))
                    elif p.error_code not in RETRIED:
                        log.log(logging.INFO if p.error_code in FENCED_MARKER else logging.ERROR,
                                "broker %d refused the marker of producer %d for %s-%d: %s", leader, producer_id,
                                answered.name, p.partition_index, ErrorCode(p.error_code).name)
                        written.append((answered.name, p.partition_index))  # Kafka gives up on these too
        return written

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
