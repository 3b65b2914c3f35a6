"""The direct data path on a broker: its region directory, notification endpoint and grants.

Started by the node when ``direct.transports`` is set. State owned here, on the event loop: the
produce regions (``RegionChain``), each partition's producer grants (one exclusive holder, or the
shared region and its sessions), consumers' slot regions, and the notification sessions. A session
is one client connection to ``notify.sock``, or to the rdma transport's listener (rdma.py) when
``direct.transports`` has ``rdma``; grants end with it (the paper: a disconnected QP loses its access).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from grete.broker.config import ConfigError
from grete.broker.direct.consume import ConsumerSlots, Slot
from grete.broker.direct.produce import ProduceRegion, RegionChain
from grete.broker.direct.push import Pusher, PushTransport
from grete.broker.direct.rdma import Hooks, RdmaEndpoint
from grete.broker.direct.rdma_push import RdmaPushTransport
from grete.broker.direct.receive import Receiver
from grete.broker.replica.partition import Partition
from grete.direct.layout import FRAME, HELLO, NOTIFY
from grete.direct.rdma import RdmaUnavailable, load_verbs
from grete.direct.shm import ShmTransport
from grete.protocol.errors import ErrorCode, KafkaError
from grete.storage.segment import LogSegment

if TYPE_CHECKING:
    from grete.broker.broker import Broker

log = logging.getLogger(__name__)

PRODUCE_VERSION = 9  # the direct path validates a batch as Produce v9 would (v2 batches only)
MAX_UNREAD_ANSWERS = 1 << 20


def push_transport(name: str) -> PushTransport:
    """The transport a leader pushes over, as a follower's registration names it (a new one per
    registration; rdma raises RdmaUnavailable, a ValueError, where it cannot run)."""
    if name == "shm":
        return ShmTransport()
    if name == "rdma":
        return RdmaPushTransport(load_verbs())
    raise ValueError(f"replication push over {name!r}: shm or rdma")


class Session(Protocol):
    """A client's notification session: answers go back through ``reply``."""

    def reply(self, frame: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class Grants:
    """One partition's direct producers: an exclusive region, or the shared one."""

    exclusive: ProduceRegion | None = None
    shared: ProduceRegion | None = None


class NotifyProtocol(asyncio.Protocol):
    """One client session on ``notify.sock``: 32-byte announcements in, 32-byte answers out."""

    def __init__(self, service: DirectService) -> None:
        self.service = service
        self.session = -1
        self.transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.session = self.service.session_opened(self)
        transport.write(HELLO.pack(self.session))

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        whole = len(buf) - len(buf) % FRAME
        announce = self.service.chain.announce
        for pos in range(0, whole, FRAME):
            key, region_id, order, flags, offset, length = NOTIFY.unpack_from(buf, pos)
            announce(self.session, key, region_id, order, flags, offset, length)
        self._buf = buf[whole:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.service.session_closed(self.session)

    def reply(self, frame: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)
            if transport.get_write_buffer_size() > MAX_UNREAD_ANSWERS:
                # A client that does not read its answers: its session ends (and its grants with
                # it) rather than the broker buffering for it without bound.
                log.warning("direct session %d: %d bytes of answers unread; closing it", self.session,
                            transport.get_write_buffer_size())
                transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class DirectService:
    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.transports = config.get_list("direct.transports")
        # One directory per data dir: a restarted broker finds and wipes its predecessor's regions
        # (nothing in them was acknowledged: acknowledged batches are in the log).
        tag = hashlib.sha256(str(broker.data_dir().resolve()).encode()).hexdigest()[:12]
        self.dir = Path(config.get_str("direct.shm.dir")) / f"grete-direct-{tag}"
        self.region_bytes = config.get_int("direct.region.bytes")
        self.max_slots = config.get_int("direct.consumer.max.slots")
        self.endpoint = str(self.dir / "notify.sock")
        self.chain = RegionChain(self._append, self._reply, config.get_int("direct.produce.timeout.ms"))
        self.grants: dict[tuple[str, int], Grants] = {}
        self.consumers: dict[int, ConsumerSlots] = {}
        self._sessions: dict[int, Session] = {}
        self._session_ids = itertools.count(1)
        self._region_ids = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self.rdma: RdmaEndpoint | None = None
        # Replication push (docs/direct.md): every broker of such a cluster both pushes, as a
        # leader, and receives, as a follower.
        self.pusher: Pusher | None = None
        self.receiver: Receiver | None = None
        if config.get_bool("direct.replication.enable"):
            self.pusher = Pusher(self._push_transport, broker.metrics, broker.now_ms, broker.node_id,
                                 Path(config.get_str("direct.shm.dir")))
            self.receiver = Receiver(self.dir, config.get_int("direct.replication.credits"),
                                     config.get_int("direct.replication.slot.bytes"), broker.metrics,
                                     config.get_int("replica.fetch.backoff.ms"),
                                     config.get_int("replica.lag.time.max.ms") // 2,
                                     # The follower registers over its first transport (docs/direct.md).
                                     transport=self.transports[0] if self.transports else "shm")

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, mode=0o700)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: NotifyProtocol(self), self.endpoint)
        if "rdma" in self.transports:
            await self._start_rdma(loop)
        if self.receiver is not None:
            await self.receiver.start()
        log.info("direct data path on %s (transports: %s)", self.dir, ",".join(self.transports))

    async def _start_rdma(self, loop: asyncio.AbstractEventLoop) -> None:
        """Kafka-like strictness: a broker asked for rdma that cannot serve it does not start."""
        config = self.broker.config
        try:
            self.rdma = RdmaEndpoint(load_verbs(), config.get_str("direct.rdma.address"),
                                     config.get_int("direct.rdma.port"),
                                     Hooks(self.session_opened, self.session_closed, self._rdma_notified),
                                     config.get_int("direct.produce.timeout.ms") / 1000)
            self.rdma.start(loop)
            if self.receiver is not None:
                self.receiver.rdma = self.rdma
        except (RdmaUnavailable, OSError) as exc:
            await self.stop()
            reason = str(exc)
            raise ConfigError(reason if reason.startswith("direct.") else f"direct.transports=rdma: {reason}") from None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self.pusher is not None:
            self.pusher.stop()
        if self.receiver is not None:
            self.receiver.stop()
        for proto in list(self._sessions.values()):
            proto.close()
        for region in list(self.chain.regions.values()):
            self.chain.drop(region, "broker stopping")
        for consumer in self.consumers.values():
            consumer.close()
        self.consumers.clear()
        if self.rdma is not None:
            self.rdma.stop()
            self.rdma = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def push_receiver(self) -> Receiver | None:
        return self.receiver

    # --- sessions ---------------------------------------------------------------------------------
    def session_opened(self, proto: Session) -> int:
        session = next(self._session_ids)
        self._sessions[session] = proto
        return session

    def session_closed(self, session: int) -> None:
        proto = self._sessions.pop(session, None)
        if proto is not None and self.receiver is not None:
            self.receiver.channel_lost(proto)  # a leader's rdma session: its pushes end with it
        self.chain.session_closed(session)
        for consumer in [c for c in self.consumers.values() if c.session == session]:
            consumer.close()  # a consumer that went away: its slots stop costing updates
            del self.consumers[consumer.key]
        for grants in self.grants.values():
            if grants.exclusive is not None and grants.exclusive.sealed:
                grants.exclusive = None

    def _push_transport(self, name: str) -> PushTransport:
        """A leader pushes only over a transport it offers itself (its direct.transports)."""
        if name not in self.transports:
            raise ValueError(f"this broker's direct.transports has no {name}")
        return push_transport(name)

    def _rdma_notified(self, session: int, frame: bytes) -> None:
        """A frame in an rdma session's ring: a leader's push into one of this broker's receive
        regions (its key names one), else a producer's announcement."""
        proto = self._sessions.get(session)
        if proto is not None and self.receiver is not None and self.receiver.rdma_frame(proto, frame):
            return
        self.chain.announce(session, *NOTIFY.unpack(frame))

    def _reply(self, session: int, frame: bytes) -> None:
        proto = self._sessions.get(session)
        if proto is not None:
            proto.reply(frame)

    # --- addresses: what the control APIs return for a transport -----------------------------------
    def endpoint_for(self, transport: str) -> str:
        """The endpoint a client of ``transport`` opens its session on; empty for rdma when it is
        not offered (the client says so, rather than failing to connect somewhere)."""
        if transport == "rdma":
            return self.rdma.endpoint if self.rdma is not None else ""
        return self.endpoint

    def region_address(self, region: ProduceRegion, transport: str) -> str:
        if transport != "rdma" or self.rdma is None:
            return str(region.path)
        key = ("region", region.id)
        if key not in self.rdma.registered():
            region.on_seal.append(lambda: self.rdma.release(key) if self.rdma is not None else None)
        return self.rdma.register_region(key, region.shm.address(), region.shm.length, produce=True)

    def slots_address(self, consumer: ConsumerSlots, transport: str) -> str:
        if transport != "rdma" or self.rdma is None:
            return str(consumer.path)
        key = ("slots", consumer.key)
        if key not in self.rdma.registered():
            consumer.on_close.append(lambda: self.rdma.release(key) if self.rdma is not None else None)
        return self.rdma.register_region(key, consumer.shm.address(), consumer.shm.length, produce=False)

    def segment_address(self, segment: LogSegment, transport: str) -> str:
        if transport != "rdma" or self.rdma is None:
            return str(segment.log_path)
        return self.rdma.register_file(str(segment.log_path))

    def _append(self, topic: str, index: int, data: bytearray) -> tuple[int, int, int]:
        answer = self.broker.appends.append_records(PRODUCE_VERSION, topic, index, data, 1, int(time.time() * 1000), [])
        return answer.error_code, answer.base_offset, answer.log_append_time_ms

    # --- produce grants ---------------------------------------------------------------------------
    def grant(self, session: int, topic: str, index: int, exclusive: bool) -> ProduceRegion:
        """The region a producer of ``session`` writes ``topic-index`` through; raises KafkaError."""
        if session not in self._sessions:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"no direct session {session} on this broker")
        self.broker.partition(topic, index)  # unknown partition / not the leader: its error
        grants = self.grants.setdefault((topic, index), Grants())
        held = grants.exclusive
        if held is not None and (held.sealed or held.exclusive_session not in self._sessions):
            grants.exclusive = held = None
        if exclusive:
            if held is not None and held.exclusive_session != session:
                raise KafkaError(ErrorCode.PRODUCER_FENCED,
                                 f"{topic}-{index} has an exclusive direct producer already")
            shared = grants.shared
            if shared is not None and not shared.sealed and (shared.sessions - {session}) & set(self._sessions):
                raise KafkaError(ErrorCode.PRODUCER_FENCED, f"{topic}-{index} has shared direct producers")
            region = self._new_region(topic, index, session)
            if held is not None:
                self._retire(held)
            grants.exclusive = region
            return region
        if held is not None:
            raise KafkaError(ErrorCode.PRODUCER_FENCED, f"{topic}-{index} has an exclusive direct producer")
        current = grants.shared
        if current is None or current.sealed or current.full():
            if current is not None and not current.sealed:
                self._retire(current)
            current = grants.shared = self._new_region(topic, index, None)
        current.sessions.add(session)
        return current

    def _new_region(self, topic: str, index: int, exclusive_session: int | None) -> ProduceRegion:
        region = ProduceRegion.create(self.dir, next(self._region_ids), topic, index, self.region_bytes,
                                      exclusive_session)
        self.chain.regions[region.id] = region
        return region

    def _retire(self, region: ProduceRegion) -> None:
        self.chain.retire(region)

    # --- consumers --------------------------------------------------------------------------------
    def consumer(self, key: int, session: int) -> ConsumerSlots:
        """A consumer's slot region: a new one for key -1 (freed with ``session`` when it is not -1)."""
        if key < 0:
            if session >= 0 and session not in self._sessions:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"no direct session {session} on this broker")
            consumer = ConsumerSlots(self.dir, self.max_slots, session)
            self.consumers[consumer.key] = consumer
            return consumer
        found = self.consumers.get(key)
        if found is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "unknown direct consumer key (stale or from another broker)")
        return found

    def watch(self, consumer: ConsumerSlots, topic: str, index: int, partition: Partition, offset: int) -> tuple[int, Slot]:
        seg = partition.segment_for(offset)
        if seg is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{partition.log_start_offset}, "
                             f"{partition.log_end_offset}] of {topic}-{index}")
        if consumer.slot_of(topic, index) is None and consumer.free() == 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"all {consumer.max_slots} slots of this consumer are in use (direct.consumer.max.slots)")
        slot = Slot(topic, index, partition, seg)
        i = consumer.assign(slot)
        partition.direct_watch = self._partition_changed
        return i, slot

    def forget(self, consumer: ConsumerSlots, slots: list[int]) -> None:
        for i in slots:
            consumer.forget(i)
        if consumer.free() == consumer.max_slots:
            consumer.close()
            self.consumers.pop(consumer.key, None)

    def _partition_changed(self, partition: Partition) -> None:
        for consumer in self.consumers.values():
            consumer.update_partition(partition)

    def refresh(self) -> None:
        for consumer in self.consumers.values():
            consumer.refresh(self._current_partition)
        if self.rdma is not None:
            # Segment files no consumer slot describes any more (read to the end, deleted): released.
            watched = {str(slot.segment.log_path) for consumer in self.consumers.values()
                       for slot in consumer.slots if slot is not None}
            for key in self.rdma.registered():
                if isinstance(key, str) and key not in watched:
                    self.rdma.release(key)

    def _current_partition(self, topic: str, index: int) -> Partition | None:
        try:
            return self.broker.partition(topic, index)
        except KafkaError:
            return None
