"""Replication push over the direct path (issue #19, the paper's §4.5): leaders write followers' logs.

A follower with ``direct.replication.enable`` creates one **receive region** per leader it follows
(``direct.replication.credits`` slots of ``direct.replication.slot.bytes``) and registers it with
the leader (DirectReplicaRegister, API 32002, on the fetcher's own connection) for partitions whose
last fetch came back clean (no error, no diverging epoch): the leader pushes from their log end. Each slot is one credit. The leader, whenever a partition changes (an
append, a high-watermark move), pushes what the follower lacks: the log's own bytes from the
follower's next offset, as many whole batches as fit a slot, with a small header (handle, leader
epoch, base offset, high watermark, log start). All appends of one loop step go out as one push per
partition (the batching of small writes). The write is one-sided into the follower's region, then a
32-byte notification (the write-with-immediate) names the slot.

The follower copies the slot out, appends it as the fetcher does (``Partition.follower_append``:
offsets, epochs and producer state kept, high watermark from the leader), and returns the credit
with its log end offset. The leader feeds that to ``Partition.update_follower`` exactly as a fetch
offset: ISR expansion and shrinking (``replica.lag.time.max.ms``) and the high watermark follow the
same rules as with fetching.

**Fallback rule.** Fetch stays the source of truth for anything but the straight line: a push whose
base offset is not the follower's log end (a gap), a leader epoch other than the registered one, a
failed append, a batch larger than a slot, a lost channel, a leadership change (LeaderAndIsr) end
pushing for the partition; the follower fetches it again (truncating through diverging epochs as
always) and registers it anew after its next clean fetch.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.metrics import BrokerMetrics
from grete.broker.partition import Partition
from grete.direct.layout import FRAME, HELLO
from grete.direct.shm import ShmRegion
from grete.direct.transport import Channel, Region, write_with_imm
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import DirectReplicaRegisterRequest, DirectReplicaRegisterResponse
from grete.storage import KafkaStorageException

log = logging.getLogger(__name__)

REGISTER_VERSION = 0
PartitionKey = tuple[str, int]

# leader -> follower, the immediate: region key, slot
PUSH = struct.Struct("<QI20x")
# Pushes of one partition in flight at once: appends made meanwhile wait and go out together in
# the next push (the batching of small writes; 2 keeps the follower busy while the leader reads).
MAX_IN_FLIGHT = 2
# A leader that refused a registration as a whole, or closed the connection on it (a Kafka broker
# or a grete broker without the direct path knows no API 32002): not asked again for this long.
LEADER_RETRY_S = 30.0
# follower -> leader, a credit back: slot, handle, the follower's log end offset, flags
CREDIT = struct.Struct("<IiqI12x")
assert PUSH.size == CREDIT.size == FRAME
# at the start of a slot: handle, leader epoch, base offset, high watermark, log start, length, flags
HEADER = struct.Struct("<iiqqqiI")
HEADER_BYTES = 64
FALLBACK = 1   # header flag: the leader stops pushing this partition (the follower fetches it)
STOP = 1       # credit flag: the follower no longer takes pushes for this handle

_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)
_LAST_DELTA = struct.Struct(">i")     # last offset delta, at byte 23 of a batch


def next_offset_after(data: bytes) -> int:
    """The offset after the last whole batch in ``data`` (one header read per batch, no records)."""
    pos, end = 0, -1
    while pos + 27 <= len(data):
        base, length = _BATCH_PREFIX.unpack_from(data, pos)
        (delta,) = _LAST_DELTA.unpack_from(data, pos + 23)
        end = base + delta + 1
        pos += 12 + length
    return end


class PollableChannel(Channel, Protocol):
    """A channel whose completions the event loop can wait for (shm: the socket; rdma: the
    completion channel's descriptor)."""

    def fileno(self) -> int: ...


class PushTransport(Protocol):
    """What a leader needs of a transport to write into a follower's region."""

    def map_region(self, address: str, length: int, *, writable: bool) -> Region: ...

    def connect(self, endpoint: str) -> PollableChannel: ...


# --- the leader's side ---------------------------------------------------------------------------

@dataclass(eq=False, slots=True)
class Pushed:
    """One partition pushed to one follower."""

    partition: Partition
    handle: int
    epoch: int
    next_offset: int  # the first offset the follower does not have (or has not been sent)
    sent_high_watermark: int = -1
    sent_log_start: int = -1  # DeleteRecords and retention reach the follower as with fetch
    in_flight: int = 0  # pushes not yet answered by a credit


@dataclass(eq=False)
class PushLink:
    """A follower's receive region as its leader sees it."""

    replica_id: int
    key: int
    region: Region
    slot_bytes: int
    credits: int
    free: list[int]
    channel: PollableChannel | None = None  # None while connecting
    pushed: dict[int, Pushed] = field(default_factory=dict)        # by handle
    handles: dict[Partition, int] = field(default_factory=dict)    # the same, by partition
    dirty: set[int] = field(default_factory=set)                   # handles with something to send
    closed: bool = False

    def add(self, pushed: Pushed) -> None:
        old = self.handles.get(pushed.partition)
        if old is not None:
            self.remove(old)
        self.pushed[pushed.handle] = pushed
        self.handles[pushed.partition] = pushed.handle
        self.dirty.add(pushed.handle)

    def remove(self, handle: int) -> None:
        pushed = self.pushed.pop(handle, None)
        if pushed is not None and self.handles.get(pushed.partition) == handle:
            del self.handles[pushed.partition]
        self.dirty.discard(handle)


class Pusher:
    """The leader's links to its followers' regions; owned by the event loop."""

    def __init__(self, transport: Callable[[str], PushTransport], metrics: BrokerMetrics,
                 now_ms: Callable[[], int], broker_id: int, shm_root: Path) -> None:
        self.transport = transport  # a transport by name (grete.direct.shm.transport)
        self.broker_id = broker_id
        self.shm_root = shm_root.resolve()
        self.metrics = metrics
        self.now_ms = now_ms
        self.links: dict[int, PushLink] = {}
        self._flush_scheduled = False

    def register(self, request: DirectReplicaRegisterRequest,
                 partition_of: Callable[[str, int], Partition | None]) -> DirectReplicaRegisterResponse:
        Topic = DirectReplicaRegisterResponse.DirectReplicaTopicResponse
        Answer = DirectReplicaRegisterResponse.DirectReplicaPartitionResponse
        try:
            link = self._link(request)
        except (OSError, ValueError, ConnectionError) as exc:
            return DirectReplicaRegisterResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                                 error_message=f"cannot open the receive region: {exc}", topics=[])
        topics = []
        for topic in request.topics:
            answers = []
            for part in topic.partitions:
                code = self._add(link, partition_of(topic.name, part.index), part)
                answers.append(Answer(index=part.index, error_code=code))
            topics.append(Topic(name=topic.name, partitions=answers))
        self._schedule()
        return DirectReplicaRegisterResponse(throttle_time_ms=0, error_code=0, topics=topics)

    def _link(self, request: DirectReplicaRegisterRequest) -> PushLink:
        link = self.links.get(request.replica_id)
        if link is not None and link.key == request.region_key and not link.closed:
            return link
        if link is not None:
            self._close(link, "the follower registered a new region")
        if request.credits < 1 or request.slot_bytes <= HEADER_BYTES:
            raise ValueError(f"{request.credits} credits of {request.slot_bytes} bytes")
        address, endpoint = request.region_address, request.endpoint
        if request.transport == "shm":
            address, endpoint = self._shm_addresses(request)
        transport = self.transport(request.transport)
        region = transport.map_region(address, request.credits * request.slot_bytes, writable=True)
        link = PushLink(request.replica_id, request.region_key, region, request.slot_bytes, request.credits,
                        list(range(request.credits)))
        self.links[request.replica_id] = link
        # Connecting waits for the follower's greeting (rdma: the connection manager's exchange): off
        # the event loop, so a follower that stalls right now stalls no one else. Pushes wait for it.
        loop = asyncio.get_running_loop()
        connecting = loop.run_in_executor(None, transport.connect, endpoint)
        connecting.add_done_callback(lambda done: self._connected(link, done))
        return link

    def _shm_addresses(self, request: DirectReplicaRegisterRequest) -> tuple[str, str]:
        """The leader writes where the request says: only into a follower's receive region, in a
        grete direct directory under ``direct.shm.dir``, named for this leader and the key, and
        connects only to that directory's ``replica.sock`` (never to any file a request names).
        The paths resolved (links followed), which are the ones used."""
        if not (Path(request.region_address).is_absolute() and Path(request.endpoint).is_absolute()):
            raise ValueError("relative paths")
        region, endpoint = Path(request.region_address).resolve(), Path(request.endpoint).resolve()
        directory = region.parent
        if (directory.parent != self.shm_root or not directory.name.startswith("grete-direct-")
                or region.name != f"replica-from-{self.broker_id}-{request.region_key}.region"
                or endpoint != directory / "replica.sock"):
            raise ValueError(f"{region} / {endpoint} are not a follower's receive region and endpoint "
                             f"under {self.shm_root}")
        return str(region), str(endpoint)

    def _connected(self, link: PushLink, done: asyncio.Future[PollableChannel]) -> None:
        if done.cancelled() or done.exception() is not None:
            self._close(link, f"cannot open the channel: {done.exception()}")
            return
        channel = done.result()
        if link.closed:
            channel.close()
            return
        link.channel = channel
        asyncio.get_running_loop().add_reader(channel.fileno(), self._credits, link)
        self._flush(link)

    def _add(self, link: PushLink, partition: Partition | None,
             part: DirectReplicaRegisterRequest.DirectReplicaPartition) -> int:
        if partition is None or not partition.is_leader or not partition.online:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if link.replica_id not in partition.replicas or link.replica_id == partition.broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            partition.check_leader_epoch(part.current_leader_epoch)
        except KafkaError as exc:
            return exc.code
        leo = part.log_end_offset
        if not partition.log_start_offset <= leo <= partition.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if part.last_fetched_epoch >= 0:
            epoch, end = partition.end_offset_for_epoch(part.last_fetched_epoch)
            if epoch != part.last_fetched_epoch or end < leo:
                # The follower's log is not a prefix of this one: Fetch's diverging epoch settles it.
                return ErrorCode.OFFSET_OUT_OF_RANGE
        link.add(Pushed(partition, part.handle, partition.leader_epoch, leo))
        partition.replica_push = self.changed
        return ErrorCode.NONE

    def changed(self, partition: Partition) -> None:
        """The partition's hook (every append, high-watermark move, leadership change)."""
        found = False
        for link in self.links.values():
            handle = link.handles.get(partition)
            if handle is not None:
                link.dirty.add(handle)
                found = True
        if not found:
            partition.replica_push = None
            return
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_all)

    def _flush_all(self) -> None:
        self._flush_scheduled = False
        for link in list(self.links.values()):
            self._flush(link)

    def _flush(self, link: PushLink) -> None:
        while link.free and link.dirty and link.channel is not None and not link.closed:
            handle = link.dirty.pop()
            pushed = link.pushed.get(handle)
            if pushed is None:
                continue
            try:
                more = self._push(link, pushed)
            except (OSError, ConnectionError, ValueError) as exc:
                self._close(link, f"push failed: {exc}")
                return
            if more:
                link.dirty.add(handle)

    def _push(self, link: PushLink, pushed: Pushed) -> bool:
        """One push of ``pushed`` into a free slot, if it needs one; whether more remains."""
        partition = pushed.partition
        flags, data = 0, b""
        if not partition.is_leader or not partition.online or partition.leader_epoch != pushed.epoch:
            flags = FALLBACK
        elif pushed.in_flight >= MAX_IN_FLIGHT:
            return False  # the credit's return marks it dirty again
        elif pushed.next_offset < partition.log_end_offset:
            data = self._read(partition, pushed.next_offset, link.slot_bytes - HEADER_BYTES)
            if not data:
                flags = FALLBACK  # the next batch is larger than a slot, or below the log start
        elif (pushed.sent_high_watermark >= partition.high_watermark
              and pushed.sent_log_start >= partition.log_start_offset) or pushed.in_flight:
            return False  # nothing new; or new offsets, sent once the push in flight is answered
        slot = link.free.pop()
        high_watermark, log_start = partition.high_watermark, partition.log_start_offset
        header = HEADER.pack(pushed.handle, pushed.epoch, pushed.next_offset, high_watermark, log_start,
                             len(data), flags)
        offset = slot * link.slot_bytes
        assert link.channel is not None  # _flush pushes only on an open channel
        link.region.write(offset, header)
        write_with_imm(link.channel, link.region, offset + HEADER_BYTES, data, PUSH.pack(link.key, slot))
        self.metrics.replica_pushes += 1
        self.metrics.replica_push_bytes += len(data)
        if flags & FALLBACK:
            self.metrics.replica_push_fallbacks += 1
            link.remove(pushed.handle)
            return False
        pushed.sent_high_watermark, pushed.sent_log_start = high_watermark, log_start
        pushed.in_flight += 1
        if data:
            pushed.next_offset = next_offset_after(data)
        # A slot's worth was not all: go on while the pipeline has room, else when a credit is back.
        return pushed.in_flight < MAX_IN_FLIGHT and pushed.next_offset < partition.log_end_offset

    @staticmethod
    def _read(partition: Partition, offset: int, max_bytes: int) -> bytes:
        try:
            result = partition.read(offset, max_bytes, upper_bound=partition.log_end_offset, min_one=False)
        except KafkaError:
            return b""
        return b"".join(os.pread(s.fd, s.size, s.position) for s in result.slices)

    def _credits(self, link: PushLink) -> None:
        assert link.channel is not None  # read only once connected
        try:
            frames = link.channel.completions(0)
        except (OSError, ConnectionError) as exc:
            self._close(link, str(exc))
            return
        now_ms = self.now_ms()
        for frame in frames:
            slot, handle, log_end_offset, flags = CREDIT.unpack(frame)
            if slot < link.credits and slot not in link.free:
                link.free.append(slot)
            pushed = link.pushed.get(handle)
            if pushed is None:
                continue
            pushed.in_flight = max(pushed.in_flight - 1, 0)
            link.dirty.add(handle)
            if flags & STOP:
                link.remove(handle)
            elif log_end_offset >= 0 and pushed.partition.leader_epoch == pushed.epoch:
                # Exactly what a fetch from ``log_end_offset`` tells the leader.
                pushed.partition.update_follower(link.replica_id, log_end_offset, now_ms)
        self._flush(link)

    def _close(self, link: PushLink, why: str) -> None:
        if link.closed:
            return
        log.info("replication push to broker %d stopped: %s", link.replica_id, why)
        link.closed = True
        if link.channel is not None:
            try:
                asyncio.get_running_loop().remove_reader(link.channel.fileno())
            except (OSError, ValueError):
                pass
            link.channel.close()
        link.region.close()
        if self.links.get(link.replica_id) is link:
            del self.links[link.replica_id]

    def stop(self) -> None:
        for link in list(self.links.values()):
            self._close(link, "broker stopping")


# --- the follower's side -------------------------------------------------------------------------

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
    handles: dict[int, Receiving] = field(default_factory=dict)
    reply: asyncio.Transport | None = None  # the leader's channel, once it has pushed
    wake_fetcher: Callable[[], None] | None = None


class Receiver:
    """The follower's receive regions (one per leader) and their endpoint, ``replica.sock``."""

    def __init__(self, directory: Path, credits: int, slot_bytes: int, metrics: BrokerMetrics,
                 retry_ms: int, start_timeout_ms: int) -> None:
        self.directory = directory
        self.endpoint = str(directory / "replica.sock")
        self.credits = credits
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
            transport="shm", replica_id=broker_id, endpoint=self.endpoint, region_address=str(region.path),
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
        region = ReceiveRegion(leader_id, key, path, shm, self.slot_bytes, self.credits)
        self.regions[leader_id] = region
        self._by_key[key] = region
        return region

    # --- pushes -----------------------------------------------------------------------------------
    def on_push(self, transport: asyncio.Transport, key: int, slot: int) -> None:
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
            transport.write(CREDIT.pack(slot, handle, -1, STOP))
            return
        partition = receiving.partition
        receiving.started = True
        self.metrics.replica_pushes_received += 1
        if (flags & FALLBACK or epoch != receiving.epoch or partition.leader_epoch != epoch or partition.is_leader
                or not partition.online or partition.leader_id != region.leader_id
                or not 0 <= length <= region.slot_bytes - HEADER_BYTES
                or (length and base_offset != partition.log_end_offset)):
            transport.write(CREDIT.pack(slot, handle, -1, STOP))
            self._fallback(region, handle)
            return
        data = region.shm.copy(offset + HEADER_BYTES, length) if length else b""
        try:
            partition.follower_append(data, high_watermark, log_start, int(time.time() * 1000))
        except (KafkaError, KafkaStorageException, ValueError) as exc:
            log.info("pushed batches of %s-%d not appended (%s): fetching it again", partition.topic,
                     partition.index, exc)
            transport.write(CREDIT.pack(slot, handle, -1, STOP))
            self._fallback(region, handle)
            return
        self.metrics.replica_push_bytes_received += length
        transport.write(CREDIT.pack(slot, handle, partition.log_end_offset, 0))

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

    def channel_lost(self, transport: asyncio.Transport) -> None:
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
            self.receiver.on_push(self.transport, key, slot)
        self._buf = buf[whole:]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.receiver.channel_lost(self.transport)
