"""The rdma transport's wiring, run anywhere: pyverbs' objects are replaced by tests/direct/fake_verbs.py
(the only thing faked; broker, client library and transport code are the real ones). What is checked
is what the code asks of the verbs: memory region access flags, queue pair state transitions and
connection parameters, work requests (opcode, remote address, rkey, length, immediate, addend) and
completion handling. Whether a real NIC does the same is test_rdma_device.py's business (skipped
where there is no device)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grete.broker.config import ConfigError
from grete.broker.direct.rdma import PER_SESSION, RING_SLOTS, SEGMENT_MAP_BYTES
from grete.direct import Consumer, Producer, atomics
from grete.direct.layout import ACK, FRAME, HEADER_BYTES, NOTIFY, ORDER_SHIFT, SLOT_BYTES
from grete.direct.rdma import (
    RDMA_HELLO,
    RdmaConnection,
    RdmaRegion,
    RdmaUnavailable,
    format_region,
    load_verbs,
)
from grete.direct.shm import ShmRegion
from grete.direct.transport import transport
from grete.protocol.errors import ErrorCode
from grete.testing import RunningBroker, broker
from tests.direct import fake_verbs
from tests.direct.conftest import consume, produce
from tests.direct.fake_verbs import E, Fabric

REGION = 65536
RDMA = {"direct.transports": "shm,rdma", "direct.rdma.address": "192.0.2.1", "direct.rdma.port": "19093",
        "direct.region.bytes": str(REGION), "direct.produce.timeout.ms": "300"}
CLIENT = {"direct.transport": "rdma"}
PRODUCE_ACCESS = (E.IBV_ACCESS_LOCAL_WRITE | E.IBV_ACCESS_REMOTE_WRITE | E.IBV_ACCESS_REMOTE_READ
                  | E.IBV_ACCESS_REMOTE_ATOMIC)


@pytest.fixture
def fabric(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fabric]:
    fabric = fake_verbs.install(monkeypatch)
    yield fabric
    shutil.rmtree(fabric.dir, ignore_errors=True)  # its FIFOs


@pytest.fixture
def rdma_broker(fabric: Fabric) -> Iterator[RunningBroker]:
    with broker(RDMA) as running:
        running.create_topic("t", 1)
        yield running


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def registrations(fabric: Fabric, access: int, length: int | None = None) -> list[tuple[int, int, int | None, int]]:
    return [r for r in fabric.registrations if r[1] == access and (length is None or r[0] == length)]


# --- refusals ---------------------------------------------------------------------------------------

def test_without_pyverbs_client_and_broker_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyverbs.device", None)  # as if python3-pyverbs were not installed
    with pytest.raises(RdmaUnavailable, match="needs pyverbs"):
        transport("rdma")
    with pytest.raises(ConfigError, match="direct.transports=rdma: .*needs pyverbs"), broker(RDMA):
        pass


def test_without_a_device_client_and_broker_refuse(fabric: Fabric) -> None:
    fabric.devices = []
    with pytest.raises(RdmaUnavailable, match="no RDMA device|none was found"):
        transport("rdma")
    with pytest.raises(ConfigError, match="none was found"), broker(RDMA):
        pass
    # shm alone is unaffected by the missing device
    with broker({**RDMA, "direct.transports": "shm"}):
        pass


def test_a_client_asking_a_shm_only_broker_for_rdma_is_told_so(fabric: Fabric) -> None:
    with broker({**RDMA, "direct.transports": "shm"}, topics={"t": 1}) as running:
        for client in (Producer, Consumer):
            with pytest.raises(RdmaUnavailable, match="does not offer the rdma transport"):
                client({"bootstrap.servers": running.bootstrap_servers, **CLIENT})


def test_the_broker_needs_an_address_and_on_demand_paging(fabric: Fabric) -> None:
    with pytest.raises(ConfigError, match="direct.rdma.address"), broker({**RDMA, "direct.rdma.address": ""}):
        pass
    fabric.odp = False
    with pytest.raises(ConfigError, match="on-demand paging"), broker(RDMA):
        pass


# --- produce and consume through the fake verbs ------------------------------------------------------

def test_produce_and_consume_over_rdma_issue_the_right_verbs(fabric: Fabric, rdma_broker: RunningBroker) -> None:
    servers = rdma_broker.bootstrap_servers
    shared = produce(servers, "t", [b"a", b"b", b"c"], **CLIENT)
    exclusive = produce(servers, "t", [b"d", b"e"], **CLIENT, **{"direct.producer.mode": "exclusive"})
    assert [(err, off) for err, off in shared + exclusive] == [(None, i) for i in range(5)]
    over_rdma = consume(servers, "t", 5, **CLIENT)
    over_shm = consume(servers, "t", 5)
    assert [(m.offset(), m.value()) for m in over_rdma] == [(m.offset(), m.value()) for m in over_shm] == \
        [(i, v) for i, v in enumerate([b"a", b"b", b"c", b"d", b"e"])]

    # Memory regions: produce regions remote write+read+atomic over the broker's mapping, slot
    # regions remote read, segment files remote read with on-demand paging, session rings remote write.
    produce_mrs = registrations(fabric, PRODUCE_ACCESS, HEADER_BYTES + REGION)
    assert len(produce_mrs) == 2 and all(address is not None for _, _, address, _ in produce_mrs)
    assert registrations(fabric, E.IBV_ACCESS_REMOTE_READ, 64 * SLOT_BYTES)
    assert registrations(fabric, E.IBV_ACCESS_REMOTE_READ | E.IBV_ACCESS_ON_DEMAND, SEGMENT_MAP_BYTES)
    assert len(registrations(fabric, E.IBV_ACCESS_LOCAL_WRITE | E.IBV_ACCESS_REMOTE_WRITE, RING_SLOTS * FRAME)) == 3
    produce_bases = {address for _, _, address, _ in produce_mrs}
    rkey_of = {address: rkey for _, _, address, rkey in produce_mrs}

    # Queue pairs: each went RESET -> INIT -> RTR -> RTS with rdma_cm's attributes; RTR and RTS
    # carried the read/atomic depths (the masks init_qp_attr returned).
    assert len(fabric.all_qps) == 6  # two producers and a consumer on rdma, and the broker's sides
    for qp in fabric.all_qps:
        assert [state for state, _ in qp.transitions] == [E.IBV_QPS_INIT, E.IBV_QPS_RTR, E.IBV_QPS_RTS]
        assert qp.transitions[1][1] & E.IBV_QP_MAX_DEST_RD_ATOMIC and qp.transitions[2][1] & E.IBV_QP_MAX_QP_RD_ATOMIC
        assert qp.init.qp_type == E.IBV_QPT_RC
    clients = [c for c in fabric.cmids if "connect" in c.calls]
    assert len(clients) == 3 and all(c.calls[:2] == ["connect", "establish"] for c in clients)
    client_qps = {qp.qp_num for qp in fabric.all_qps}
    assert all(c.param.qp_num in client_qps for c in clients)
    assert all(c.param.rnr_retry == 7 for c in fabric.cmids if c.param is not None)

    posted = fabric.posted
    # Shared producer: a fetch-and-add of (1 << 48) + size on the ordering word (byte 0 of its region).
    faa = [p for p in posted if p.opcode == E.IBV_WR_ATOMIC_FETCH_AND_ADD]
    assert faa and all(p.remote in produce_bases and p.rkey == rkey_of[p.remote] and p.length == 8 and p.add >> ORDER_SHIFT == 1
                       and 0 < p.add & ((1 << ORDER_SHIFT) - 1) <= REGION for p in faa)
    # Each batch: a WRITE into a produce region's data area, then on the same QP a WRITE_WITH_IMM of
    # the 32-byte notification into the session ring, the immediate naming the ring slot.
    imm = [i for i, p in enumerate(posted) if p.opcode == E.IBV_WR_RDMA_WRITE_WITH_IMM]
    assert len(imm) == 2
    for i in imm:
        note, data = posted[i], posted[i - 1]
        assert data.opcode == E.IBV_WR_RDMA_WRITE and data.qp_num == note.qp_num
        base = next(b for b in produce_bases if b <= data.remote < b + HEADER_BYTES + REGION)
        assert data.remote - base >= HEADER_BYTES and data.rkey == rkey_of[base]
        assert note.length == FRAME and 0 <= note.imm < RING_SLOTS
        ring = fabric.mrs.get(note.rkey)
        assert ring is None or note.remote == ring.buf + note.imm * FRAME  # (None: the session has ended)
    assert all(p.signaled for p in posted)
    # ...and the WRITE is left in flight: its completion is first polled after the notification is
    # posted (one round trip for both; RC completes them in order).
    for i in imm:
        data, note = posted[i - 1], posted[i]
        polled = fabric.events.index(("polled", data.qp_num, data.wr_id))
        assert polled > fabric.events.index(("post", note.qp_num, note.wr_id))
    # Consumers: READs only (slot region and segment file), never a write.
    reads = [p for p in posted if p.opcode == E.IBV_WR_RDMA_READ]
    assert any(p.length % SLOT_BYTES == 0 and p.length <= 64 * SLOT_BYTES for p in reads)
    # Completion channels: every event taken was acknowledged (a CQ cannot be destroyed otherwise).
    assert all(cq.acked == cq.events for cq in fabric.cqs)


def test_a_sealed_region_is_deregistered_after_the_grace(fabric: Fabric, rdma_broker: RunningBroker) -> None:
    assert produce(rdma_broker.bootstrap_servers, "t", [b"x"], **CLIENT, **{"direct.producer.mode": "exclusive"}) \
        == [(None, 0)]
    # The exclusive producer's session ended: its region is sealed; its MR outlives it by the grace.
    region_keys = [rkey for rkey, mr in fabric.mrs.items() if mr.access == PRODUCE_ACCESS]
    assert wait_for(lambda: all(rkey not in fabric.mrs for rkey in region_keys), 3.0)
    assert region_keys


def test_client_disconnect_ends_the_session_and_its_grants(fabric: Fabric, rdma_broker: RunningBroker) -> None:
    service = rdma_broker.node.broker.direct
    verbs = load_verbs()
    conn = RdmaConnection(verbs, service.rdma.endpoint)
    assert wait_for(lambda: len(service.rdma.sessions) == 1)
    session = next(iter(service.rdma.sessions.values()))
    assert conn.session_id == session.id and conn.ring_slots == RING_SLOTS
    assert (conn.ring_address, conn.ring_rkey) == (session.ring.buf, session.ring.rkey)
    conn.close()
    assert wait_for(lambda: not service.rdma.sessions and session.id not in service._sessions)


def test_an_immediate_outside_the_ring_closes_that_session_only(fabric: Fabric, rdma_broker: RunningBroker) -> None:
    service = rdma_broker.node.broker.direct
    verbs = load_verbs()
    good, bad = RdmaConnection(verbs, service.rdma.endpoint), RdmaConnection(verbs, service.rdma.endpoint)
    try:
        assert wait_for(lambda: len(service.rdma.sessions) == 2)
        bad.post(E.IBV_WR_RDMA_WRITE_WITH_IMM, FRAME, bad.ring_rkey, bad.ring_address, imm=RING_SLOTS + 3)
        assert wait_for(lambda: len(service.rdma.sessions) == 1)
        assert next(iter(service.rdma.sessions.values())).id == good.session_id
        # The other client goes on: a notification with a stale key is answered PRODUCER_FENCED.
        good.notify(NOTIFY.pack(12345, 999, 0, 0, 0, 100))
        answers = good.completions(5.0)
        assert len(answers) == 1 and ACK.unpack(answers[0])[2] == ErrorCode.PRODUCER_FENCED
    finally:
        good.close()
        bad.close()


def test_client_region_bounds_are_checked_before_anything_is_posted(fabric: Fabric,
                                                                    rdma_broker: RunningBroker) -> None:
    service = rdma_broker.node.broker.direct
    transport_ = transport("rdma")
    conn = transport_.connect(service.rdma.endpoint)
    try:
        region = transport_.map_region(f"rdma:{0x10000:#x}:77:4096", 4096, writable=True)
        before = len(fabric.posted)
        with pytest.raises(ValueError, match="outside"):
            region.write(4090, b"12345678")
        with pytest.raises(ValueError, match="outside"):
            region.read(-8, 8)
        assert len(fabric.posted) == before
        with pytest.raises(ValueError, match="shorter"):
            transport_.map_region(f"rdma:{0x10000:#x}:77:4096", 8192, writable=False)
        # A key the broker never handed out: the NIC refuses it (remote access error), a clean error here.
        with pytest.raises(ConnectionError, match="status 10"):
            region.load(0)
    finally:
        conn.close()


def test_hello_frame_layout() -> None:
    assert RDMA_HELLO.unpack(RDMA_HELLO.pack(7, 0xDEAD000, 42, RING_SLOTS)) == (7, 0xDEAD000, 42, RING_SLOTS)


def test_slot_reads_check_the_sequence_words(fabric: Fabric, rdma_broker: RunningBroker, tmp_path: Path) -> None:
    """The consumer's one-operation slot read over RDMA: two READs, a slot counts only when its
    sequence word is even and unchanged; the empty poll is one READ compared with the snapshot."""
    service = rdma_broker.node.broker.direct
    verbs = load_verbs()
    conn = RdmaConnection(verbs, service.rdma.endpoint)
    slots = ShmRegion(tmp_path / "slots", 3 * SLOT_BYTES, writable=True, create=True)
    try:
        mr = verbs.mr.MR(conn.pd, slots.length, E.IBV_ACCESS_REMOTE_READ, address=slots.address())
        region = RdmaRegion(conn, format_region(slots.address(), mr.rkey, slots.length), slots.length)
        slots.slot_write(SLOT_BYTES, (5, 6, 7, 8, 9, 10, 11, 12))
        dst = atomics.ffi().new("char[]", 3 * SLOT_BYTES)
        changed = region.changed_check(dst, 3, SLOT_BYTES)
        before = len(fabric.posted)
        assert region.snapshot_into(dst, 3, SLOT_BYTES)
        assert [p.opcode for p in fabric.posted[before:]] == [E.IBV_WR_RDMA_READ] * 2
        assert bytes(atomics.ffi().buffer(dst)) == slots.read(0, 3 * SLOT_BYTES)
        before = len(fabric.posted)
        assert changed() == 0 and len(fabric.posted) == before + 1
        slots.slot_write(2 * SLOT_BYTES, (1, 2, 3, 4, 5, 6, 7, 8))
        assert changed() == 1
        seq = slots.load(2 * SLOT_BYTES)
        slots.store(2 * SLOT_BYTES, seq + 1)  # the broker is in the middle of writing slot 2
        assert not region.snapshot_into(dst, 3, SLOT_BYTES)
        slots.store(2 * SLOT_BYTES, seq + 2)
        assert region.snapshot_into(dst, 3, SLOT_BYTES) and changed() == 0
        mr.close()
    finally:
        conn.close()
        slots.close()


def test_sessions_are_capped_to_what_the_completion_queue_holds(monkeypatch: pytest.MonkeyPatch,
                                                                 request: pytest.FixtureRequest) -> None:
    """An overflowing CQ would break every queue pair on it: with room for two sessions (per the
    device's max_cqe), a third connection is rejected and the two keep working."""
    fabric = fake_verbs.install(monkeypatch, Fabric(max_cqe=2 * PER_SESSION + 5))
    request.addfinalizer(lambda: shutil.rmtree(fabric.dir, ignore_errors=True))
    with broker(RDMA, topics={"t": 1}) as running:
        endpoint = running.node.broker.direct.rdma.endpoint
        verbs = load_verbs()
        first, second = RdmaConnection(verbs, endpoint), RdmaConnection(verbs, endpoint)
        try:
            with pytest.raises(RuntimeError, match="rejected"):
                RdmaConnection(verbs, endpoint)
            assert [c.calls[-1] for c in fabric.cmids if "reject" in c.calls] == ["reject"]
            first.notify(NOTIFY.pack(1, 999, 0, 0, 0, 100))
            assert ACK.unpack(first.completions(5.0)[0])[2] == ErrorCode.PRODUCER_FENCED
        finally:
            first.close()
            second.close()
    fabric.max_cqe = PER_SESSION - 1
    with pytest.raises(ConfigError, match="fewer than one session needs"), broker(RDMA):
        pass
