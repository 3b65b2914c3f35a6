"""How a cluster's share-partition leaders reach the share coordinators (Kafka's persister): the
coordinator of a share partition is the leader of the ``__share_group_state`` partition its key
hashes to; this broker's own ``ShareCoordinator`` when it leads that partition, else the leader over
an inter-broker connection (ReadShareGroupState v0, WriteShareGroupState v1, DeleteShareGroupState v0,
ReadShareGroupStateSummary v1, InitializeShareGroupState v0).

While the coordinator moves (its broker died and the controller has not yet elected another, or the
metadata is behind), a request is retried with a short backoff until ``share.coordinator.write.timeout.ms``
has passed several times over, as Kafka's persister retries retriable errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from grete.broker.broker import Broker
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.coordinator.share.share_format import SNAPSHOT, ShareKey, ShareState, StateBatch, partition_for
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC

log = logging.getLogger(__name__)

READ_VERSION, WRITE_VERSION, DELETE_VERSION, SUMMARY_VERSION = 0, 1, 0, 1
LIST_OFFSETS_VERSION, INITIALIZE_VERSION = 7, 0
RETRY_BACKOFF_S = 0.2
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT}
T = TypeVar("T")


class ClusterSharePersister:
    def __init__(self, broker: Broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self._peers: dict[int, PeerConnection] = {}

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        async def local() -> ShareState | None:
            return self.broker.share_coordinator.read(key, leader_epoch)

        async def remote(peer: PeerConnection) -> ShareState | None:
            R = ReadShareGroupStateRequest
            response: ReadShareGroupStateResponse = await peer.call(R(group_id=key.group_id, topics=[R.ReadStateData(
                topic_id=key.topic_id, partitions=[R.PartitionData(partition=key.partition,
                                                                   leader_epoch=leader_epoch)])]), READ_VERSION)
            p = response.results[0].partitions[0]
            _raise(p.error_code, p.error_message)
            if p.start_offset < 0:
                return None
            return ShareState(SNAPSHOT, 0, p.start_offset, p.state_epoch, leader_epoch, batches=[
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches])

        return await self._retrying(key, local, remote)

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> None:
        async def local() -> None:
            await self.broker.share_coordinator.write(key, state_epoch, leader_epoch, start_offset, batches)

        async def remote(peer: PeerConnection) -> None:
            W = WriteShareGroupStateRequest
            response: WriteShareGroupStateResponse = await peer.call(W(group_id=key.group_id, topics=[W.WriteStateData(
                topic_id=key.topic_id, partitions=[W.PartitionData(
                    partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                    start_offset=start_offset, delivery_complete_count=-1, state_batches=[W.StateBatch(
                        first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.delivery_state,
                        delivery_count=b.delivery_count) for b in batches])])]), WRITE_VERSION)
            p = response.results[0].partitions[0]
            _raise(p.error_code, p.error_message)

        await self._retrying(key, local, remote)

    async def summary(self, key: ShareKey) -> tuple[int, int, int] | None:
        """(state epoch, start offset, delivery-complete count), or None for a share partition never
        initialized."""
        async def local() -> tuple[int, int, int] | None:
            found = self.broker.share_coordinator.summary(key)
            return None if found is None else (found.state_epoch, found.start_offset, found.delivery_complete_count)

        async def remote(peer: PeerConnection) -> tuple[int, int, int] | None:
            S = ReadShareGroupStateSummaryRequest
            response: ReadShareGroupStateSummaryResponse = await peer.call(S(group_id=key.group_id, topics=[
                S.ReadStateSummaryData(topic_id=key.topic_id, partitions=[S.PartitionData(
                    partition=key.partition, leader_epoch=-1)])]), SUMMARY_VERSION)
            p = response.results[0].partitions[0]
            _raise(p.error_code, p.error_message)
            return None if p.start_offset < 0 else (p.state_epoch, p.start_offset, max(0, p.delivery_complete_count))

        return await self._retrying(key, local, remote)

    async def end_offset(self, topic: str, index: int) -> int | None:
        """The partition's high watermark as its leader answers ListOffsets LATEST (the lag's end, as
        Kafka's group coordinator asks it); None if it cannot be had now."""
        meta = self.broker.metadata.topic(topic)
        leader = meta.partitions[index].leader if meta is not None and index in meta.partitions else -1
        if leader < 0:
            return None
        local = self.broker.partitions.get((topic, index))
        if leader == self.broker.node_id:
            return local.high_watermark if local is not None and local.is_leader else None
        L = ListOffsetsRequest
        try:
            peer = self._peer(leader)
            response: ListOffsetsResponse = await peer.call(L(replica_id=-1, topics=[L.ListOffsetsTopic(
                name=topic, partitions=[L.ListOffsetsPartition(partition_index=index, timestamp=-1)])]),
                LIST_OFFSETS_VERSION)
        except (KafkaError, PeerError):
            return None
        p = response.topics[0].partitions[0]
        return p.offset if p.error_code == ErrorCode.NONE else None

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        async def local() -> None:
            await self.broker.share_coordinator.initialize(key, state_epoch, start_offset)

        async def remote(peer: PeerConnection) -> None:
            I = InitializeShareGroupStateRequest  # noqa: E741
            response: InitializeShareGroupStateResponse = await peer.call(I(group_id=key.group_id, topics=[
                I.InitializeStateData(topic_id=key.topic_id, partitions=[I.PartitionData(
                    partition=key.partition, state_epoch=state_epoch, start_offset=start_offset)])]), INITIALIZE_VERSION)
            p = response.results[0].partitions[0]
            _raise(p.error_code, p.error_message)

        await self._retrying(key, local, remote)

    async def delete(self, key: ShareKey) -> None:
        async def local() -> None:
            await self.broker.share_coordinator.delete(key)

        async def remote(peer: PeerConnection) -> None:
            D = DeleteShareGroupStateRequest
            response: DeleteShareGroupStateResponse = await peer.call(D(group_id=key.group_id, topics=[
                D.DeleteStateData(topic_id=key.topic_id, partitions=[D.PartitionData(partition=key.partition)])]),
                DELETE_VERSION)
            p = response.results[0].partitions[0]
            _raise(p.error_code, p.error_message)

        await self._retrying(key, local, remote)

    async def _retrying(self, key: ShareKey, local: Callable[[], Awaitable[T]],
                        remote: Callable[[PeerConnection], Awaitable[T]]) -> T:
        deadline = time.monotonic() + 4 * self.broker.config.get_int("share.coordinator.write.timeout.ms") / 1000
        while True:
            try:
                await self.broker.ensure_share_state_topic()
                leader = self._coordinator(key)
                if leader == self.broker.node_id:
                    return await local()
                return await remote(self._peer(leader))
            except (KafkaError, PeerError) as exc:
                code = exc.code if isinstance(exc, KafkaError) else ErrorCode.COORDINATOR_NOT_AVAILABLE
                if code not in RETRIABLE or time.monotonic() > deadline:
                    raise KafkaError(code, str(exc)) from None
                log.debug("share state of %s: %s; retrying", key, exc)
            await asyncio.sleep(RETRY_BACKOFF_S)  # the coordinator is moving: back off, then look again

    def _coordinator(self, key: ShareKey) -> int:
        meta = self.broker.metadata.topic(SHARE_GROUP_STATE_TOPIC)
        index = partition_for(key, self.broker.config.get_int("share.coordinator.state.topic.num.partitions"))
        leader = meta.partitions[index].leader if meta is not None and index in meta.partitions else -1
        if leader < 0:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_GROUP_STATE_TOPIC}-{index} has no leader")
        return leader

    def _peer(self, leader: int) -> PeerConnection:
        endpoint = self.broker.broker_endpoint(leader, self.listener)
        if endpoint is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader} has no {self.listener} endpoint")
        peer = self._peers.get(leader)
        if peer is None or (peer.host, peer.port) != (endpoint.host, endpoint.port):
            peer = self._peers[leader] = PeerConnection(endpoint.host, endpoint.port,
                                                        f"share-persister-{self.broker.node_id}", timeout_s=10.0)
        return peer

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()


def _raise(code: int, message: Any) -> None:
    if code != ErrorCode.NONE:
        raise KafkaError(ErrorCode(code), message)
