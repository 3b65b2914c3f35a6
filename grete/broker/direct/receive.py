"""Replication push, the follower's side (replication.py has the design): one receive region per
leader, each push validated and appended as the fetcher appends.

Over shm the leader maps the region and notifies on ``replica.sock``; over rdma the region is a
memory region (remote write) of the broker's rdma endpoint, and the leader, an rdma client of that
endpoint, notifies through its session ring (DirectService hands those frames here). Either way a
push arrives as (channel, key, slot) and the credit goes back on the same channel."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.direct.rdma import RING_SLOTS, RdmaEndpoint
from grete.broker.direct.replication import (
    CREDIT,
    FALLBACK,
    HEADER,
    HEADER_BYTES,
    PUSH,
    REGISTER_VERSION,
    STOP,
    PartitionKey,
)
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.replica.partition import Partition
from grete.direct.layout import FRAME, HELLO
from grete.direct.shm import ShmRegion
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import DirectReplicaRegisterRequest, DirectReplicaRegisterResponse
from grete.storage import KafkaStorageException

log = logging.getLogger(__name__)

# A leader that refused a registration as a whole, or closed the connection on it (a Kafka broker
# or a grete broker without the direct path knows no API 32002): not asked again for this long.
LEADER_RETRY_S = 30.0

class Replier(Protocol):
    """The channel a leader's notifications came on: credits go back on it."""

    def reply(self, frame: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(eq=False, slots=True)
class Receiving:
    partition: Partition
    handle: int
    epoch: int
    started: bool = False  # a first push arrived (the leader pushes at once after registering)


@dataclass(eq=False)
class ReceiveRegion:
    """One leader's pushes land here: ``credits`` slots of ``slot_bytes``."""

    leader_id: int
    key: int
    path: Path
    shm: ShmRegion
    slot_bytes: int
    credits: int
    address: str  # as the leader is told it (shm: the file; rdma: address, rkey, length)
    handles: dict[int, Receiving] = field(default_factory=dict)
    reply: Replier | None = None  # the leader's channel, once it has pushed
    wake_fetcher: Callable[[], None] | None = None


class Receiver:
    """The follower's receive regions (one per leader) and their shm endpoint, ``replica.sock``.
    ``transport`` is what it registers with: shm, or rdma through ``rdma`` (set once it started)."""

    def __init__(self, directory: Path, credits: int, slot_bytes: int, metrics: BrokerMetrics,
                 retry_ms: int, start_timeout_ms: int, transport: str = "shm") -> None:
        self.directory = directory
        self.transport = transport
        self.rdma: RdmaEndpoint | None = None
        self.endpoint = str(directory / "replica.sock")
        # rdma: no more credits than the session ring has slots, so the leader's notifications
        # never wait for a receive (RNR) and its send queue stays bounded (rdma_push.py).
        self.credits = min(credits, RING_SLOTS) if transport == "rdma" else credits
        self.slot_bytes = slot_bytes
        self.metrics = metrics
        self.retry_s = retry_ms / 1000
        self.start_timeout_s = start_timeout_ms / 1000
        self.regions: dict[int, ReceiveRegion] = {}   # by leader
        self._by_key: dict[int, ReceiveRegion] = {}
        self._pushed: dict[PartitionKey, tuple[ReceiveRegion, int]] = {}
        self._not_before: dict[PartitionKey, float] = {}
        self._leader_not_before: dict[int, float] = {}
        self._handles = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: _ReceiveProtocol(self), self.endpoint)

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for region in list(self.regions.values()):
            self._close_region(region)

    # --- what the fetcher asks ------------------------------------------------------------------
    def pushed(self, key: PartitionKey) -> bool:
        return key in self._pushed

    def eligible(self, partition: Partition) -> bool:
        key = (partition.topic, partition.index)
        now = time.monotonic()
        return (key not in self._pushed and self._not_before.get(key, 0.0) <= now
                and self._leader_not_before.get(partition.leader_id, 0.0) <= now)

    def drop(self, key: PartitionKey) -> None:
        """Stop taking pushes for ``key`` (unfollowed, followed anew, or a fallback)."""
        found = self._pushed.pop(key, None)
        if found is not None:
            region, handle = found
            region.handles.pop(handle, None)

    async def register(self, leader_id: int, peer: PeerConnection, broker_id: int,
                       partitions: list[Partition], wake_fetcher: Callable[[], None]) -> None:
        """Ask ``leader_id`` to push ``partitions`` (each just fetched cleanly), from their log ends."""
        region = self._region(leader_id)
        region.wake_fetcher = wake_fetcher
        by_topic: dict[str, list[DirectReplicaRegisterRequest.DirectReplicaPartition]] = {}
        handles: dict[PartitionKey, int] = {}
        for partition in partitions:
            key = (partition.topic, partition.index)
            handle = next(self._handles)
            # Taken before the answer: the leader may push before its answer arrives.
            region.handles[handle] = Receiving(partition, handle, partition.leader_epoch)
            self._pushed[key] = (region, handle)
            handles[key] = handle
            by_topic.setdefault(partition.topic, []).append(DirectReplicaRegisterRequest.DirectReplicaPartition(
                index=partition.index, handle=handle, current_leader_epoch=partition.leader_epoch,
                log_end_offset=partition.log_end_offset, last_fetched_epoch=partition.latest_epoch()))
        request = DirectReplicaRegisterRequest(
            transport=self.transport, replica_id=broker_id, endpoint=self._endpoint(), region_address=region.address,
            region_key=region.key, slot_bytes=region.slot_bytes, credits=region.credits,
            topics=[DirectReplicaRegisterRequest.DirectReplicaTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        try:
            response: DirectReplicaRegisterResponse = await peer.call(request, REGISTER_VERSION)
        except PeerError as exc:
            log.info("registering for replication push with broker %d failed: %s", leader_id, exc)
            response = DirectReplicaRegisterResponse(error_code=ErrorCode.NETWORK_EXCEPTION, topics=[])
        accepted = {(t.name, p.index) for t in response.topics for p in t.partitions if p.error_code == 0}
        loop = asyncio.get_running_loop()
        for key, handle in handles.items():
            if response.error_code != 0 or key not in accepted:
                self._fallback(region, handle, wake=False)
            else:
                loop.call_later(self.start_timeout_s, self._check_started, region, handle)
        if response.error_code != 0:
            log.info("broker %d refused replication push (%s): fetching from it for %.0f s", leader_id,
                     response.error_message or ErrorCode(response.error_code).name, LEADER_RETRY_S)
            self._leader_not_before[leader_id] = time.monotonic() + LEADER_RETRY_S

    def _region(self, leader_id: int) -> ReceiveRegion:
        region = self.regions.get(leader_id)
        if region is not None:
            return region
        key = secrets.randbits(63)
        path = self.directory / f"replica-from-{leader_id}-{key}.region"
        shm = ShmRegion(path, self.credits * self.slot_bytes, writable=True, create=True)
        address = str(path)
        if self.transport == "rdma":
            if self.rdma is None:
                shm.close()
                path.unlink(missing_ok=True)
                raise ConnectionError("the rdma transport is not running")
            e = self.rdma.verbs.e
            address = self.rdma.register(("replica", key), shm.address(), shm.length,
                                         e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        region = ReceiveRegion(leader_id, key, path, shm, self.slot_bytes, self.credits, address)
        self.regions[leader_id] = region
        self._by_key[key] = region
        return region

    def _endpoint(self) -> str:
        if self.transport == "rdma" and self.rdma is not None:
            return self.rdma.endpoint
        return self.endpoint

    # --- pushes -----------------------------------------------------------------------------------
    def rdma_frame(self, channel: Replier, frame: bytes) -> bool:
        """A frame from an rdma session's ring: a leader's push when its key names one of the
        receive regions (handled, True); else not one of ours (a producer's announcement)."""
        key, slot = PUSH.unpack(frame)
        if key not in self._by_key:
            return False
        self.on_push(channel, key, slot)
        return True

    def on_push(self, transport: Replier, key: int, slot: int) -> None:
        region = self._by_key.get(key)
        if region is None or not 0 <= slot < region.credits or region.reply not in (None, transport):
            # Not a leader following the protocol (or one whose region this follower let go).
            log.warning("replication push with an unknown key or slot %d: closing its channel", slot)
            transport.close()
            return
        region.reply = transport
        offset = slot * region.slot_bytes
        handle, epoch, base_offset, high_watermark, log_start, length, flags = HEADER.unpack(
            region.shm.read(offset, HEADER.size))
        receiving = region.handles.get(handle)
        if receiving is None:
            transport.reply(CREDIT.pack(slot, handle, -1, STOP))
            return
        partition = receiving.partition
        receiving.started = True
        self.metrics.replica_pushes_received += 1
        if (flags & FALLBACK or epoch != receiving.epoch or partition.leader_epoch != epoch or partition.is_leader
                or not partition.online or partition.leader_id != region.leader_id
                or not 0 <= length <= region.slot_bytes - HEADER_BYTES
                or (length and base_offset != partition.log_end_offset)):
            transport.reply(CREDIT.pack(slot, handle, -1, STOP))
            self._fallback(region, handle)
            return
        data = region.shm.copy(offset + HEADER_BYTES, length) if length else b""
        try:
            partition.follower_append(data, high_watermark, log_start, int(time.time() * 1000))
        except (KafkaError, KafkaStorageException, ValueError) as exc:
            log.info("pushed batches of %s-%d not appended (%s): fetching it again", partition.topic,
                     partition.index, exc)
            transport.reply(CREDIT.pack(slot, handle, -1, STOP))
            self._fallback(region, handle)
            return
        self.metrics.replica_push_bytes_received += length
        transport.reply(CREDIT.pack(slot, handle, partition.log_end_offset, 0))

    def _check_started(self, region: ReceiveRegion, handle: int) -> None:
        """A leader that accepted but never pushed (its channel to us failed to open): fetch again."""
        receiving = region.handles.get(handle)
        if receiving is not None and not receiving.started:
            log.info("no push from broker %d for %s-%d since it was registered: fetching it again",
                     region.leader_id, receiving.partition.topic, receiving.partition.index)
            self._fallback(region, handle)

    def _fallback(self, region: ReceiveRegion, handle: int, *, wake: bool = True) -> None:
        receiving = region.handles.pop(handle, None)
        if receiving is None:
            return
        key = (receiving.partition.topic, receiving.partition.index)
        if self._pushed.get(key) == (region, handle):
            del self._pushed[key]
        self._not_before[key] = time.monotonic() + self.retry_s
        self.metrics.replica_push_fallbacks += 1
        if wake and region.wake_fetcher is not None:
            region.wake_fetcher()

    def channel_lost(self, transport: Replier) -> None:
        for region in [r for r in self.regions.values() if r.reply is transport]:
            log.info("replication push channel from broker %d lost: fetching its partitions", region.leader_id)
            for handle in list(region.handles):
                self._fallback(region, handle)
            self._close_region(region)

    def _close_region(self, region: ReceiveRegion) -> None:
        for handle in list(region.handles):
            self._fallback(region, handle, wake=False)
        self.regions.pop(region.leader_id, None)
        self._by_key.pop(region.key, None)
        if self.rdma is not None and self.transport == "rdma":
            # Deregistered before the mapping goes (release's grace would outlive it): the
            # leader's writes into it fail from now on, which ends its link.
            self.rdma.release(("replica", region.key), grace=False)
        region.shm.close()
        region.path.unlink(missing_ok=True)


class _ReceiveProtocol(asyncio.Protocol):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(HELLO.pack(0))

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        buf = self._buf + data
        whole = len(buf) - len(buf) % FRAME
        for pos in range(0, whole, FRAME):
            if self.transport.is_closing():
                return
            key, slot = PUSH.unpack_from(buf, pos)
            self.receiver.on_push(self, key, slot)
        self._buf = buf[whole:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.receiver.channel_lost(self)

    def reply(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
