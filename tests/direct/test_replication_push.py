"""Replication push between a leader and a follower partition in one process, over the real shm
transport (receive region, notification socket, credits) and over the rdma transport on the fake
verbs of tests/direct/fake_verbs.py (the follower's rdma endpoint and memory region, the leader's
queue pair; only pyverbs' objects are fake): pushes append as the fetcher does, the leader learns
the follower's log end from the credits, small appends of one loop step go out as one push, and each
fallback case (a gap, a leader epoch change, a corrupt batch, a bad key) ends pushing for the
partition and leaves the follower's log as it was. Over rdma the work requests themselves are
checked (WRITE of the slot, WRITE_WITH_IMM of the notification: rkey, remote address, length,
immediate). Only the Kafka-protocol hop of the registration is short-circuited (the cluster tests in
tests/cluster/test_direct_replication.py run it, over shm)."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grete.broker.cluster.peer import PeerError
from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.direct.push import Pusher
from grete.broker.direct.rdma import RING_SLOTS, Hooks, RdmaEndpoint, RdmaSession
from grete.broker.direct.rdma_push import RdmaPushTransport
from grete.broker.direct.receive import Receiver
from grete.broker.direct.replication import CREDIT, HEADER, HEADER_BYTES, PUSH
from grete.broker.direct.service import push_transport
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.node import Node
from grete.broker.replica.partition import Partition
from grete.direct.layout import FRAME
from grete.direct.rdma import RdmaConnection, load_verbs, parse_region
from grete.direct.shm import ShmRegion
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DirectReplicaRegisterRequest, DirectReplicaRegisterResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log
from grete.testing import broker
from tests.direct import fake_verbs
from tests.direct.conftest import consume, produce
from tests.direct.fake_verbs import E, Fabric

TOPIC_ID = uuid.uuid4()
KEY = ("t", 0)


def batch(n: int = 1, value: bytes = b"v") -> RecordBatch:
    return RecordBatch(build_batch([Record(i, 0, None, value) for i in range(n)]))


class LoopbackPeer:
    """The leader's DirectReplicaRegister handler called directly (no TCP in between)."""

    def __init__(self, pusher: Pusher, partitions: dict[tuple[str, int], Partition]) -> None:
        self.pusher = pusher
        self.partitions = partitions

    async def call(self, request: DirectReplicaRegisterRequest, version: int) -> DirectReplicaRegisterResponse:
        return self.pusher.register(request, lambda t, i: self.partitions.get((t, i)))


FOLLOWER_RDMA = ("192.0.2.2", 19094)  # the follower broker's rdma listener (on the fake fabric)


@pytest.fixture(params=["shm", "rdma"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fabric | None]:
    """The transport the follower registers with: shm, or rdma over the fake verbs (the fabric)."""
    if request.param == "shm":
        yield None
        return
    fabric = fake_verbs.install(monkeypatch)
    yield fabric
    shutil.rmtree(fabric.dir, ignore_errors=True)


class Sessions:
    """The follower broker's rdma sessions, dispatched as DirectService does: a frame whose key names
    a receive region is a push, anything else would be a producer's (none in these tests)."""

    def __init__(self) -> None:
        self.receiver: Receiver | None = None
        self.sessions: dict[int, RdmaSession] = {}
        self.ids = itertools.count(1)
        self.not_pushes = 0

    def opened(self, session: RdmaSession) -> int:
        sid = next(self.ids)
        self.sessions[sid] = session
        return sid

    def closed(self, sid: int) -> None:
        session = self.sessions.pop(sid, None)
        if session is not None and self.receiver is not None:
            self.receiver.channel_lost(session)

    def notified(self, sid: int, frame: bytes) -> None:
        assert self.receiver is not None
        if not self.receiver.rdma_frame(self.sessions[sid], frame):
            self.not_pushes += 1


@dataclass
class Pair:
    leader: Partition
    follower: Partition
    pusher: Pusher
    receiver: Receiver
    leader_metrics: BrokerMetrics
    follower_metrics: BrokerMetrics
    wakes: list[int]
    fabric: Fabric | None = None
    endpoint: RdmaEndpoint | None = None
    sessions: Sessions | None = None

    async def register(self) -> None:
        peer: Any = LoopbackPeer(self.pusher, {KEY: self.leader})
        await self.receiver.register(1, peer, 2, [self.follower], lambda: self.wakes.append(1))
        await settle(lambda: self.follower_metrics.replica_pushes_received > 0)


async def settle(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def log_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


@asynccontextmanager
async def pair(tmp_path: Path, fabric: Fabric | None = None) -> AsyncIterator[Pair]:
    leader_log = Log.open(tmp_path / "a" / "t-0", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    leader = Partition("t", 0, TOPIC_ID, leader_log, -1, is_leader=False, replicated=True, broker_id=1)
    leader.make_leader(0, 0, 1, (1, 2), [1, 2], now_ms=int(time.time() * 1000))
    follower_log = Log.open(tmp_path / "b" / "t-0", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    follower = Partition("t", 0, TOPIC_ID, follower_log, -1, is_leader=False, replicated=True, broker_id=2)
    follower.make_follower(0, 0, 1, (1, 2))
    regions = tmp_path / "shm" / "grete-direct-test"
    regions.mkdir(parents=True)
    leader_metrics, follower_metrics = BrokerMetrics(), BrokerMetrics()
    pusher = Pusher(push_transport, leader_metrics, lambda: int(time.time() * 1000), 1, tmp_path / "shm")
    receiver = Receiver(regions, 4, 65536, follower_metrics, 50, 1000,
                        transport="shm" if fabric is None else "rdma")
    endpoint, sessions = None, None
    if fabric is not None:
        sessions = Sessions()
        sessions.receiver = receiver
        endpoint = RdmaEndpoint(load_verbs(), *FOLLOWER_RDMA, Hooks(sessions.opened, sessions.closed,
                                                                    sessions.notified), 0.2)
        endpoint.start(asyncio.get_running_loop())
        receiver.rdma = endpoint
    await receiver.start()
    try:
        yield Pair(leader, follower, pusher, receiver, leader_metrics, follower_metrics, [], fabric, endpoint,
                   sessions)
    finally:
        pusher.stop()
        receiver.stop()
        if endpoint is not None:
            endpoint.stop()


def test_appends_are_pushed_and_acks_all_completes_on_credits(tmp_path: Path, transport: Fabric | None) -> None:
    asyncio.run(_pushed(tmp_path, transport))


async def _pushed(tmp_path: Path, fabric: Fabric | None) -> None:
    async with pair(tmp_path, fabric) as p:
        await p.register()
        assert p.receiver.pushed(KEY)
        pushes = p.leader_metrics.replica_pushes
        for i in range(10):  # ten small appends in one loop step
            p.leader.append(batch(3, b"x" * i), 1000)
        result = p.leader.append(batch(2), 1000)
        replicated = await asyncio.wait_for(p.leader.wait_for_replication(result.last_offset + 1, 5000), 5)
        assert replicated == ErrorCode.NONE  # the high watermark moved on the follower's credit
        assert p.leader.high_watermark == p.leader.log_end_offset == 32
        await settle(lambda: p.follower.high_watermark == 32)  # a high-watermark-only push follows
        # One push carried all eleven batches, and one more the new high watermark.
        assert p.leader_metrics.replica_pushes - pushes == 2
        assert p.leader_metrics.replica_push_bytes == p.leader.size_bytes
        assert log_bytes(tmp_path / "b" / "t-0") == log_bytes(tmp_path / "a" / "t-0")
        assert p.follower.end_offset_for_epoch(0) == (0, 32)
        assert p.follower_metrics.replica_push_fallbacks == 0
        p.leader.delete_records_before(30)  # DeleteRecords reaches the follower without an append
        await settle(lambda: p.follower.log_start_offset == 30)
        if fabric is not None:
            check_rdma_work_requests(p, fabric)


def check_rdma_work_requests(p: Pair, fabric: Fabric) -> None:
    """What the leader asked of the NIC: per push an RDMA WRITE of the slot into the follower's
    receive region (the memory region it registered, remote write only) and a WRITE_WITH_IMM of the
    notification into its session ring, the immediate naming the ring slot; credits back as SENDs."""
    region = p.receiver.regions[1]
    slot_bytes, credits = region.slot_bytes, region.credits
    remote, rkey, length = parse_region(region.address)
    assert length == slot_bytes * credits == 4 * 65536
    assert (length, E.IBV_ACCESS_LOCAL_WRITE | E.IBV_ACCESS_REMOTE_WRITE, region.shm.address(), rkey) \
        in fabric.registrations
    link = p.pusher.links[2]
    assert link.channel is not None
    leader_qp = link.channel.qp.qp_num  # type: ignore[attr-defined]
    (session,) = p.endpoint.sessions.values() if p.endpoint is not None else ()
    posted = [w for w in fabric.posted if w.qp_num == leader_qp]
    assert len(posted) == 2 * p.leader_metrics.replica_pushes
    pushed_bytes = 0
    for write, notify in zip(posted[::2], posted[1::2], strict=True):
        assert write.opcode == E.IBV_WR_RDMA_WRITE and write.rkey == rkey and write.signaled
        slot, within = divmod(write.remote - remote, slot_bytes)
        assert within == 0 and 0 <= slot < credits and HEADER_BYTES <= write.length <= slot_bytes
        pushed_bytes += write.length - HEADER_BYTES
        assert notify.opcode == E.IBV_WR_RDMA_WRITE_WITH_IMM and notify.rkey == session.ring.rkey
        assert notify.remote == session.ring.buf + notify.imm * FRAME and 0 <= notify.imm < RING_SLOTS
        assert notify.length == FRAME
        # The frame in the ring names the receive region and the slot just written (fewer pushes
        # than ring slots: none overwritten).
        assert PUSH.unpack(session.ring.read(FRAME, notify.imm * FRAME)) == (region.key, slot)
    assert pushed_bytes == p.leader_metrics.replica_push_bytes
    credits_back = [w for w in fabric.posted if w.qp_num == session.qp.qp_num and w.opcode == E.IBV_WR_SEND]
    assert len(credits_back) == p.follower_metrics.replica_pushes_received + 1  # + the greeting
    assert all(w.length == FRAME for w in credits_back)
    last = session.send_mr.read(FRAME, credits_back[-1].wr_id * FRAME)
    assert CREDIT.unpack(last)[2] == p.follower.log_end_offset  # the follower's log end


def test_a_gap_sends_the_partition_back_to_fetching(tmp_path: Path, transport: Fabric | None) -> None:
    asyncio.run(_gap(tmp_path, transport))


async def _gap(tmp_path: Path, fabric: Fabric | None) -> None:
    async with pair(tmp_path, fabric) as p:
        p.leader.append(batch(2), 1000)
        p.follower.follower_append(p.leader.read(0, 1 << 20, upper_bound=2, min_one=True).read_bytes(), 0, 0, 1000)
        await p.register()
        p.leader.append(batch(1), 1000)
        await settle(lambda: p.follower.log_end_offset == 3)
        p.follower.truncate_to(2)  # the follower's log end is no longer where the leader pushes
        p.leader.append(batch(1), 1000)
        await settle(lambda: not p.receiver.pushed(KEY))
        assert p.follower.log_end_offset == 2  # nothing appended out of place
        assert p.wakes  # the fetcher was told to fetch it again
        await settle(lambda: not p.pusher.links[2].handles)  # the leader stopped on the credit's STOP
        assert not p.receiver.eligible(p.follower)  # not registered again at once
        await asyncio.sleep(0.06)
        assert p.receiver.eligible(p.follower)
        # What the fetcher then does: fetch from its log end (a clean fetch), register again.
        fetched = p.leader.read(2, 1 << 20, upper_bound=p.leader.log_end_offset, min_one=True).read_bytes()
        p.follower.follower_append(fetched, p.leader.high_watermark, 0, 1000)
        pushes = p.follower_metrics.replica_pushes_received
        await p.register()
        await settle(lambda: p.follower_metrics.replica_pushes_received > pushes)
        p.leader.append(batch(2), 1000)
        await settle(lambda: p.follower.log_end_offset == p.leader.log_end_offset == 6)
        assert p.receiver.pushed(KEY) and len(p.pusher.links[2].handles) == 1
        assert log_bytes(tmp_path / "b" / "t-0") == log_bytes(tmp_path / "a" / "t-0")


def test_a_new_leader_epoch_ends_pushing(tmp_path: Path, transport: Fabric | None) -> None:
    asyncio.run(_epoch(tmp_path, transport))


async def _epoch(tmp_path: Path, fabric: Fabric | None) -> None:
    async with pair(tmp_path, fabric) as p:
        await p.register()
        p.leader.make_leader(1, 1, 1, (1, 2), [1, 2], now_ms=int(time.time() * 1000))
        await settle(lambda: not p.receiver.pushed(KEY))
        assert p.leader_metrics.replica_push_fallbacks == 1
        p.leader.append(batch(1), 1000)
        await asyncio.sleep(0.05)
        assert p.follower.log_end_offset == 0 and p.leader.replica_push is None


def test_bad_pushes_are_refused_and_the_follower_keeps_serving(tmp_path: Path, transport: Fabric | None) -> None:
    asyncio.run(_bad(tmp_path, transport))


async def _bad(tmp_path: Path, fabric: Fabric | None) -> None:
    async with pair(tmp_path, fabric) as p:
        await p.register()
        region = p.receiver.regions[1]
        if fabric is None:
            await shm_stranger(p, region.key)
        else:
            await rdma_stranger(p, region.key)
        assert p.receiver.pushed(KEY)
        # A corrupt batch in a slot, announced on the leader's own channel: not appended, fallback.
        link = p.pusher.links[2]
        await settle(lambda: len(link.free) == link.credits)
        slot = link.free.pop()
        data = bytearray(build_batch([Record(0, 0, None, b"v")]))
        data[-1] ^= 0xFF  # the CRC no longer matches
        handle = link.handles[p.leader]
        link.region.write(slot * link.slot_bytes, HEADER.pack(handle, 0, 0, 0, 0, len(data), 0))
        link.region.write(slot * link.slot_bytes + HEADER_BYTES, data)
        assert link.channel is not None
        link.channel.notify(PUSH.pack(link.key, slot))
        await settle(lambda: not p.receiver.pushed(KEY))
        assert p.follower.log_end_offset == 0
        await settle(lambda: slot in link.free)  # the credit came back


async def shm_stranger(p: Pair, key: int) -> None:
    """A stranger with a wrong key: its channel is closed, nothing else changes."""
    loop = asyncio.get_running_loop()
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stranger.setblocking(False)
    await loop.sock_connect(stranger, p.receiver.endpoint)
    assert len(await loop.sock_recv(stranger, FRAME)) == FRAME  # the greeting
    await loop.sock_sendall(stranger, PUSH.pack(key + 1, 0))
    assert await asyncio.wait_for(loop.sock_recv(stranger, FRAME), 5) == b""
    stranger.close()


async def rdma_stranger(p: Pair, key: int) -> None:
    """Another rdma client of the follower: its writes into the receive region without the region's
    rkey fail at the NIC (the region unchanged), and its notification naming the region (the key
    right, from a session other than the leader's) closes its session; the leader's goes on."""
    assert p.endpoint is not None
    region = p.receiver.regions[1]
    remote, rkey, _ = parse_region(region.address)
    loop = asyncio.get_running_loop()
    stranger = await loop.run_in_executor(None, RdmaConnection, load_verbs(), p.endpoint.endpoint)
    try:
        before = region.shm.read(0, 64)
        stranger.staging.write(b"\xff" * 64, 64, 0)
        with pytest.raises(ConnectionError, match="completion status"):
            stranger.post(E.IBV_WR_RDMA_WRITE, 64, rkey + 1, remote)
        assert region.shm.read(0, 64) == before
        assert len(p.endpoint.sessions) == 2
        stranger.notify(PUSH.pack(key, 0))
        await settle(lambda: len(p.endpoint.sessions) == 1 if p.endpoint is not None else False)
    finally:
        stranger.close()


def test_a_wrong_rkey_in_a_registration_ends_the_link_at_the_nic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fabric = fake_verbs.install(monkeypatch)
    try:
        asyncio.run(_wrong_rkey(tmp_path, fabric))
    finally:
        shutil.rmtree(fabric.dir, ignore_errors=True)


async def _wrong_rkey(tmp_path: Path, fabric: Fabric) -> None:
    async with pair(tmp_path, fabric) as p:
        region = p.receiver._region(1)
        remote, rkey, length = parse_region(region.address)
        # What a registration altered on the way (or naming memory the follower never offered) gets.
        region.address = f"rdma:{remote:#x}:{rkey + 7}:{length}"
        watch = ShmRegion(region.path, length, writable=False)  # outlives the region's own mapping
        peer: Any = LoopbackPeer(p.pusher, {KEY: p.leader})
        await p.receiver.register(1, peer, 2, [p.follower], lambda: p.wakes.append(1))
        await settle(lambda: any(w.rkey == rkey + 7 for w in fabric.posted))
        await settle(lambda: 2 not in p.pusher.links)  # the failed WRITE's completion ended the link
        # The leader destroyed its id without rdma_disconnect (which would wait on its event loop
        # for the follower's answer); the follower saw the connection end all the same.
        (leader_id,) = [c for c in fabric.cmids if "connect" in c.calls]
        assert "disconnect" not in leader_id.calls
        await settle(lambda: p.endpoint is not None and not p.endpoint.sessions)
        await settle(lambda: not p.receiver.pushed(KEY))  # and the follower fetches (no push came)
        assert watch.read(0, length) == bytes(length)  # nothing written
        watch.close()
        assert p.follower.log_end_offset == 0 and p.wakes


def test_push_without_a_direct_transport_is_refused_at_start(tmp_path: Path) -> None:
    config = BrokerConfig({"direct.replication.enable": "true", "log.dirs": str(tmp_path)})
    with pytest.raises(ConfigError, match="direct.transports"):
        Node(config)


class ClosingPeer:
    """A leader that closes the connection on API 32002 (Kafka, or grete without the direct path)."""

    async def call(self, request: DirectReplicaRegisterRequest, version: int) -> DirectReplicaRegisterResponse:
        raise PeerError("connection closed")


def test_a_leader_without_push_is_not_asked_again_at_once(tmp_path: Path) -> None:
    asyncio.run(_refusing(tmp_path))


async def _refusing(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        peer: Any = ClosingPeer()
        assert p.receiver.eligible(p.follower)
        await p.receiver.register(1, peer, 2, [p.follower], lambda: None)
        assert not p.receiver.pushed(KEY)  # it keeps fetching
        assert not p.receiver.eligible(p.follower)  # and the leader is not asked again for a while


def test_the_leader_writes_only_into_a_followers_receive_region(tmp_path: Path) -> None:
    asyncio.run(_addresses(tmp_path))


async def _addresses(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        victim = tmp_path / "a" / "t-0" / "00000000000000000000.log"
        before = victim.read_bytes()
        region = p.receiver._region(1)
        good = dict(transport="shm", replica_id=2, endpoint=p.receiver.endpoint, region_address=str(region.path),
                    region_key=region.key, slot_bytes=region.slot_bytes, credits=region.credits, topics=[])
        for bad in ({"region_address": str(victim)},                                   # any file
                    {"region_key": region.key + 1},                                    # not named for the key
                    {"endpoint": str(tmp_path / "elsewhere.sock")},                    # another socket
                    {"region_address": "relative/" + region.path.name}):
            answer = p.pusher.register(DirectReplicaRegisterRequest(**{**good, **bad}), lambda t, i: p.leader)
            assert answer.error_code == ErrorCode.INVALID_REQUEST, bad
        assert not p.pusher.links and victim.read_bytes() == before
        # A path through ".." that resolves to the region is the region.
        dotted = str(region.path.parent / ".." / "grete-direct-test" / region.path.name)
        answer = p.pusher.register(DirectReplicaRegisterRequest(**{**good, "region_address": dotted}), lambda t, i: p.leader)
        assert answer.error_code == 0


def test_a_broker_receives_over_its_first_transport_and_pushes_only_over_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DirectService's part: the receiver registers over the first of direct.transports, its rdma
    regions on the broker's rdma endpoint; ring frames that name no receive region still reach the
    produce path (a producer over rdma is served); a leader refuses a transport it does not offer."""
    fabric = fake_verbs.install(monkeypatch)
    rdma = {"direct.transports": "rdma,shm", "direct.rdma.address": "192.0.2.1", "direct.rdma.port": "19093",
            "direct.region.bytes": "65536", "direct.replication.enable": "true"}
    try:
        with broker(rdma, topics={"t": 1}) as running:
            service: Any = running.broker.direct
            assert service.receiver.transport == "rdma" and service.receiver.rdma is service.rdma
            assert isinstance(service._push_transport("rdma"), RdmaPushTransport)
            delivered = produce(running.bootstrap_servers, "t", [b"a", b"b"], **{"direct.transport": "rdma"})
            assert [(err, off) for err, off in delivered] == [(None, 0), (None, 1)]
            assert [m.value() for m in consume(running.bootstrap_servers, "t", 2)] == [b"a", b"b"]
        with broker({**rdma, "direct.transports": "shm"}) as running:
            service = running.broker.direct
            assert service.receiver.transport == "shm"
            with pytest.raises(ValueError, match="direct.transports has no rdma"):
                service._push_transport("rdma")
    finally:
        shutil.rmtree(fabric.dir, ignore_errors=True)
