"""Replication push, the leader's side (replication.py has the design): one link per follower's
receive region, pushes into its free slots, credits back with the follower's log end offset."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from grete.broker.direct.replication import CREDIT, FALLBACK, HEADER, HEADER_BYTES, PUSH, STOP
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.replica.partition import Partition
from grete.direct.transport import Channel
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import DirectReplicaRegisterRequest, DirectReplicaRegisterResponse

log = logging.getLogger(__name__)

# Pushes of one partition in flight at once: appends made meanwhile wait and go out together in
# the next push (the batching of small writes; 2 keeps the follower busy while the leader reads).
MAX_IN_FLIGHT = 2

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


class PushTarget(Protocol):
    """A follower's receive region as its leader writes it (shm: the mapping; rdma: RDMA WRITEs)."""

    length: int

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...

    def close(self) -> None: ...


class PushTransport(Protocol):
    """What a leader needs of a transport to write into a follower's region."""

    def map_region(self, address: str, length: int, *, writable: bool) -> PushTarget: ...

    def connect(self, endpoint: str) -> PollableChannel: ...


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
    region: PushTarget
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
        self.transport = transport  # a transport by name (grete.broker.direct.service.push_transport)
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
        assert link.channel is not None  # _flush pushes only on an open channel
        # One write of the slot (rdma: one RDMA WRITE), then the notification (WRITE_WITH_IMM): the
        # follower never sees a notification before its slot's bytes (shm: the socket write is the
        # release; rdma: RC ordering on the one queue pair).
        link.region.write(slot * link.slot_bytes, header + bytes(HEADER_BYTES - HEADER.size) + data)
        link.channel.notify(PUSH.pack(link.key, slot))
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
