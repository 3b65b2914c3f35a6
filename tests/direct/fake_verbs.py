"""A stand-in for pyverbs (the verbs objects only) so the rdma transport's wiring runs without a NIC.

``install(monkeypatch)`` puts fake ``pyverbs.*`` modules in ``sys.modules``; grete imports them as it
would the real ones. The fake "fabric" executes work requests against real process memory (memory
regions are real addresses, as pyverbs' are), checks rkeys, bounds and access flags as a NIC does,
delivers receives in order with RNR-retry semantics (an operation needing a receive waits until one
is posted), and records every registration, state transition and work request for the tests to
inspect. Completion channels and rdma_cm channels are FIFOs whose names contain what the real
descriptors' /proc links contain, so grete's descriptor discovery and event-loop wiring run as they
would. Enum values are rdma-core's.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import os
import sys
import tempfile
import threading
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

E = types.SimpleNamespace(
    IBV_WR_RDMA_WRITE=0, IBV_WR_RDMA_WRITE_WITH_IMM=1, IBV_WR_SEND=2, IBV_WR_RDMA_READ=4,
    IBV_WR_ATOMIC_FETCH_AND_ADD=6, IBV_ACCESS_LOCAL_WRITE=1, IBV_ACCESS_REMOTE_WRITE=2,
    IBV_ACCESS_REMOTE_READ=4, IBV_ACCESS_REMOTE_ATOMIC=8, IBV_ACCESS_ON_DEMAND=64, IBV_WC_SEND=0,
    IBV_WC_RDMA_WRITE=1, IBV_WC_RDMA_READ=2, IBV_WC_FETCH_ADD=4, IBV_WC_RECV=128,
    IBV_WC_RECV_RDMA_WITH_IMM=129, IBV_QPS_RESET=0, IBV_QPS_INIT=1, IBV_QPS_RTR=2, IBV_QPS_RTS=3,
    IBV_QPS_ERR=6, IBV_QPT_RC=2, IBV_SEND_SIGNALED=2, IBV_WC_SUCCESS=0, IBV_WC_REM_ACCESS_ERR=10,
    IBV_WC_WR_FLUSH_ERR=5, IBV_ATOMIC_NONE=0, IBV_ATOMIC_HCA=1, IBV_ODP_SUPPORT=1, IBV_ODP_SUPPORT_READ=8,
    IBV_QP_STATE=1, IBV_QP_MAX_DEST_RD_ATOMIC=131072, IBV_QP_MAX_QP_RD_ATOMIC=8192)
CE = types.SimpleNamespace(RDMA_PS_TCP=262, RAI_PASSIVE=1)
WC_OF = {E.IBV_WR_RDMA_WRITE: E.IBV_WC_RDMA_WRITE, E.IBV_WR_RDMA_WRITE_WITH_IMM: E.IBV_WC_RDMA_WRITE,
         E.IBV_WR_SEND: E.IBV_WC_SEND, E.IBV_WR_RDMA_READ: E.IBV_WC_RDMA_READ,
         E.IBV_WR_ATOMIC_FETCH_AND_ADD: E.IBV_WC_FETCH_ADD}
NEEDS = {E.IBV_WR_RDMA_WRITE: E.IBV_ACCESS_REMOTE_WRITE, E.IBV_WR_RDMA_WRITE_WITH_IMM: E.IBV_ACCESS_REMOTE_WRITE,
         E.IBV_WR_RDMA_READ: E.IBV_ACCESS_REMOTE_READ, E.IBV_WR_ATOMIC_FETCH_AND_ADD: E.IBV_ACCESS_REMOTE_ATOMIC}


@dataclass
class Posted:
    """One work request as the fabric saw it."""

    qp_num: int
    wr_id: int
    opcode: int
    rkey: int
    remote: int
    length: int
    imm: int
    add: int | None
    signaled: bool


class Rec:
    """A plain attribute bag (QPCap, QPInitAttr, QPAttr, ConnParam, AddrInfo, SGE, WC...)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


@dataclass
class Fabric:
    devices: list[str] = field(default_factory=lambda: ["fake_rxe0"])
    atomic_caps: int = E.IBV_ATOMIC_HCA
    odp: bool = True
    max_cqe: int = 4194303
    lock: threading.RLock = field(default_factory=threading.RLock)
    mrs: dict[int, Any] = field(default_factory=dict)
    # (length, access, address registered over or None when pyverbs allocated it, rkey)
    registrations: list[tuple[int, int, int | None, int]] = field(default_factory=list)
    qps: dict[int, Any] = field(default_factory=dict)
    all_qps: list[Any] = field(default_factory=list)
    cmids: list[Any] = field(default_factory=list)
    cqs: list[Any] = field(default_factory=list)
    posted: list[Posted] = field(default_factory=list)
    # ("post", qp_num, wr_id) / ("polled", qp_num, wr_id), in the order they happened
    events: list[tuple[str, int, int]] = field(default_factory=list)
    listeners: dict[tuple[str, int], Any] = field(default_factory=dict)
    dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="fake-verbs-"))
    _keys: Any = field(default_factory=lambda: itertools.count(0x1000))
    _qpns: Any = field(default_factory=lambda: itertools.count(0x100))
    _fifos: Any = field(default_factory=lambda: itertools.count())

    def fifo(self, kind: str) -> int:
        """A descriptor whose /proc link names ``kind``, readable when signalled."""
        path = os.path.join(self.dir, f"{kind}-{next(self._fifos)}")
        os.mkfifo(path)
        return os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def mr_for(self, rkey: int, remote: int, length: int, access: int) -> Any | None:
        mr = self.mrs.get(rkey)
        if mr is None or not mr.access & access:
            return None
        if remote < mr.buf or remote + length > mr.buf + mr.length:
            return None
        return mr


def build(fabric: Fabric) -> dict[str, types.ModuleType]:
    class Context:
        def __init__(self, name: str = "") -> None:
            self.name = name

        def query_device(self) -> Rec:
            return Rec(atomic_caps=fabric.atomic_caps, max_cqe=fabric.max_cqe)

        def query_device_ex(self) -> Rec:
            caps = E.IBV_ODP_SUPPORT if fabric.odp else 0
            return Rec(odp_caps=Rec(general_caps=caps, rc_odp_caps=E.IBV_ODP_SUPPORT_READ if fabric.odp else 0))

    def get_device_list() -> list[Rec]:
        if not fabric.devices:
            raise RuntimeError("Failed to get devices list")  # what pyverbs raises when there are none
        return [Rec(name=name.encode()) for name in fabric.devices]

    class PD:
        def __init__(self, ctx: Context) -> None:
            self.ctx = ctx

        def close(self) -> None:
            pass

    class MR:
        def __init__(self, pd: PD, length: int, access: int, address: int | None = None) -> None:
            if access & (E.IBV_ACCESS_REMOTE_WRITE | E.IBV_ACCESS_REMOTE_ATOMIC) and not access & E.IBV_ACCESS_LOCAL_WRITE:
                raise ValueError("remote write/atomic access needs local write (EINVAL)")
            self._own = None
            if address is None:
                self._own = ctypes.create_string_buffer(length)
                address = ctypes.addressof(self._own)
            self.buf, self.length, self.access = address, length, access
            with fabric.lock:
                self.rkey = self.lkey = next(fabric._keys)
                fabric.mrs[self.rkey] = self
                fabric.registrations.append((length, access, None if self._own is not None else address,
                                             self.rkey))

        def read(self, length: int, offset: int) -> bytes:
            return ctypes.string_at(self.buf + offset, length)

        def write(self, data: bytes, length: int, offset: int) -> None:
            ctypes.memmove(self.buf + offset, bytes(data), length)

        def close(self) -> None:
            with fabric.lock:
                fabric.mrs.pop(self.rkey, None)

    class CompChannel:
        def __init__(self, ctx: Context) -> None:
            self.fd = fabric.fifo("infinibandevent")

        def signal(self) -> None:
            os.write(self.fd, b"e")

        def get_cq_event(self, cq: Any) -> None:
            os.read(self.fd, 1)
            cq.events += 1

        def close(self) -> None:
            os.close(self.fd)

    class CQ:
        def __init__(self, ctx: Context, cqe: int, cq_context: Any, channel: CompChannel | None, vector: int) -> None:
            self.channel, self.wcs, self.armed, self.events, self.acked = channel, collections.deque(), False, 0, 0
            fabric.cqs.append(self)

        def push(self, wc: Rec) -> None:
            with fabric.lock:
                self.wcs.append(wc)
                if self.armed and self.channel is not None:
                    self.armed = False
                    self.channel.signal()

        def req_notify(self) -> None:
            with fabric.lock:
                self.armed = True

        def ack_events(self, n: int) -> None:
            self.acked += n

        def poll(self, n: int) -> tuple[int, list[Rec]]:
            with fabric.lock:
                out = [self.wcs.popleft() for _ in range(min(n, len(self.wcs)))]
                fabric.events.extend(("polled", wc.qp_num, wc.wr_id) for wc in out)
            return len(out), out

        def close(self) -> None:
            pass

    class QP:
        def __init__(self, pd: PD, init: Rec) -> None:
            self.init, self.scq, self.rcq = init, init.scq, init.rcq
            self.state, self.transitions = E.IBV_QPS_RESET, []
            self.recvs: collections.deque[Rec] = collections.deque()
            self.waiting: collections.deque[Any] = collections.deque()  # operations in RNR retry
            self.peer: QP | None = None
            with fabric.lock:
                self.qp_num = next(fabric._qpns)
                fabric.qps[self.qp_num] = self
                fabric.all_qps.append(self)

        def modify(self, attr: Rec, mask: int) -> None:
            self.transitions.append((attr.qp_state, mask))
            self.state = attr.qp_state

        def post_recv(self, wr: Rec) -> None:
            if self.state == E.IBV_QPS_RESET:
                raise ValueError("post_recv on a QP in RESET")
            with fabric.lock:
                self.recvs.append(wr)
                while self.waiting and self.recvs:
                    self.waiting.popleft()()

        def post_send(self, wr: Rec) -> None:
            if self.state != E.IBV_QPS_RTS or self.peer is None:
                raise ValueError("post_send on a QP not in RTS")
            sge = wr.sg[0]
            with fabric.lock:
                fabric.events.append(("post", self.qp_num, wr.wr_id))
                fabric.posted.append(Posted(self.qp_num, wr.wr_id, wr.opcode, wr.rkey, wr.remote, sge.length, wr.imm_data,
                                            wr.add, bool(wr.send_flags & E.IBV_SEND_SIGNALED)))
                self._execute(wr, sge, self.peer)

        def _complete(self, wr: Rec, status: int = E.IBV_WC_SUCCESS) -> None:
            self.scq.push(Rec(wr_id=wr.wr_id, status=status, opcode=WC_OF[wr.opcode], qp_num=self.qp_num,
                              imm_data=0, byte_len=0))

        def _execute(self, wr: Rec, sge: Rec, peer: QP) -> None:
            op = wr.opcode
            if op in NEEDS:
                mr = fabric.mr_for(wr.rkey, wr.remote, sge.length, NEEDS[op])
                if mr is None or (op == E.IBV_WR_ATOMIC_FETCH_AND_ADD and wr.remote % 8):
                    self._complete(wr, E.IBV_WC_REM_ACCESS_ERR)
                    return
            if op in (E.IBV_WR_RDMA_WRITE_WITH_IMM, E.IBV_WR_SEND) and not peer.recvs:
                peer.waiting.append(lambda: self._execute(wr, sge, peer))  # RNR: retried when a receive comes
                return
            if op in (E.IBV_WR_RDMA_WRITE, E.IBV_WR_RDMA_WRITE_WITH_IMM):
                ctypes.memmove(wr.remote, sge.addr, sge.length)
            elif op == E.IBV_WR_RDMA_READ:
                ctypes.memmove(sge.addr, wr.remote, sge.length)
            elif op == E.IBV_WR_ATOMIC_FETCH_AND_ADD:
                word = ctypes.c_uint64.from_address(wr.remote)
                old = word.value
                word.value = (old + wr.add) % 2**64
                ctypes.c_uint64.from_address(sge.addr).value = old
            if op in (E.IBV_WR_RDMA_WRITE_WITH_IMM, E.IBV_WR_SEND):
                recv = peer.recvs.popleft()
                if op == E.IBV_WR_SEND:
                    ctypes.memmove(recv.sg[0].addr, sge.addr, sge.length)
                peer.rcq.push(Rec(wr_id=recv.wr_id, status=E.IBV_WC_SUCCESS, qp_num=peer.qp_num,
                                  opcode=E.IBV_WC_RECV if op == E.IBV_WR_SEND else E.IBV_WC_RECV_RDMA_WITH_IMM,
                                  imm_data=wr.imm_data, byte_len=sge.length))
            self._complete(wr)

        def close(self) -> None:
            with fabric.lock:
                fabric.qps.pop(self.qp_num, None)

    class SendWR(Rec):
        def __init__(self, wr_id: int = 0, opcode: int = 0, num_sge: int = 1, imm_data: int = 0,
                     sg: list[Rec] | None = None, send_flags: int = 0) -> None:
            super().__init__(wr_id=wr_id, opcode=opcode, num_sge=num_sge, imm_data=imm_data, sg=sg,
                             send_flags=send_flags, rkey=0, remote=0, add=None)

        def set_wr_rdma(self, rkey: int, addr: int) -> None:
            self.rkey, self.remote = rkey, addr

        def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
            self.rkey, self.remote, self.add = rkey, addr, compare_add

    class RecvWR(Rec):
        def __init__(self, wr_id: int = 0, num_sge: int = 0, sg: list[Rec] | None = None) -> None:
            super().__init__(wr_id=wr_id, num_sge=num_sge, sg=sg)

    def SGE(addr: int, length: int, lkey: int) -> Rec:  # noqa: N802 - pyverbs' name
        return Rec(addr=addr, length=length, lkey=lkey)

    class AddrInfo(Rec):
        def __init__(self, src: str | None = None, dst: str | None = None, src_service: str | None = None,
                     dst_service: str | None = None, port_space: int = 0, flags: int = 0) -> None:
            super().__init__(src=src, dst=dst, src_service=src_service, dst_service=dst_service,
                             port_space=port_space, flags=flags)

    class ConnParam(Rec):
        def __init__(self, resources: int = 1, depth: int = 1, flow_control: int = 0, retry: int = 5,
                     rnr_retry: int = 5, srq: int = 0, qp_num: int = 0) -> None:
            super().__init__(resources=resources, depth=depth, retry=retry, rnr_retry=rnr_retry, qp_num=qp_num)

    class CMID:
        def __init__(self, creator: AddrInfo | None = None) -> None:
            self.context = Context("fake_rxe0")
            self.requests: collections.deque[Any] = collections.deque()
            self.peer: CMID | None = None
            self.param: ConnParam | None = None
            self.established = threading.Event()
            self.rejected = False
            self.calls: list[str] = []
            self.fd = -1
            fabric.cmids.append(self)
            if creator is None:
                return
            if creator.flags & CE.RAI_PASSIVE:
                self.where = (creator.src, int(creator.src_service))
                self.fd = fabric.fifo("rdma_cm")
            else:
                self.where = (creator.dst, int(creator.dst_service))
                if self.where not in fabric.listeners:
                    raise RuntimeError(f"rdma_create_ep: no route to {self.where}")

        def listen(self, backlog: int = 1) -> None:
            fabric.listeners[self.where] = self

        def init_qp_attr(self, state: int) -> tuple[Rec, int]:
            attr = Rec(qp_state=state, max_dest_rd_atomic=1, max_rd_atomic=1, rnr_retry=7)
            mask = E.IBV_QP_STATE | {E.IBV_QPS_RTR: E.IBV_QP_MAX_DEST_RD_ATOMIC,
                                     E.IBV_QPS_RTS: E.IBV_QP_MAX_QP_RD_ATOMIC}.get(state, 0)
            return attr, mask

        def connect(self, param: ConnParam) -> None:
            self.calls.append("connect")
            self.param = param
            listener = fabric.listeners[self.where]
            listener.requests.append(self)
            os.write(listener.fd, b"r")
            if not self.established.wait(10):
                raise RuntimeError("rdma_connect: no answer")
            if self.rejected:
                raise RuntimeError("rdma_connect: rejected")  # pyverbs raises PyverbsRDMAError

        def get_request(self) -> CMID:
            os.read(self.fd, 1)
            client = self.requests.popleft()
            conn = CMID()
            conn.fd = fabric.fifo("rdma_cm")
            conn.peer, client.peer = client, conn
            return conn

        def accept(self, param: ConnParam) -> None:
            self.calls.append("accept")
            self.param = param
            assert self.peer is not None and self.peer.param is not None
            with fabric.lock:
                mine, theirs = fabric.qps[param.qp_num], fabric.qps[self.peer.param.qp_num]
                mine.peer, theirs.peer = theirs, mine
            self.peer.established.set()

        def establish(self) -> None:
            self.calls.append("establish")

        def disconnect(self) -> None:
            self.calls.append("disconnect")
            peer, self.peer = self.peer, None
            if peer is not None and peer.fd >= 0:
                os.write(peer.fd, b"d")  # the other side's DISCONNECTED event

        def reject(self) -> None:
            self.calls.append("reject")
            assert self.peer is not None
            self.peer.rejected = True
            self.peer.established.set()
            self.peer.peer, self.peer = None, None  # never connected: nothing to disconnect

        def close(self) -> None:
            peer, self.peer = self.peer, None
            if peer is not None and peer.fd >= 0:
                # Destroying a connected id: the kernel CM sends the DREQ (no wait for the DREP).
                os.write(peer.fd, b"d")
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def module(name: str, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        return mod

    return {
        "pyverbs": module("pyverbs"),
        "pyverbs.device": module("pyverbs.device", Context=Context, get_device_list=get_device_list),
        "pyverbs.pd": module("pyverbs.pd", PD=PD),
        "pyverbs.mr": module("pyverbs.mr", MR=MR),
        "pyverbs.cq": module("pyverbs.cq", CQ=CQ, CompChannel=CompChannel),
        "pyverbs.qp": module("pyverbs.qp", QP=QP, QPCap=Rec, QPInitAttr=Rec, QPAttr=Rec),
        "pyverbs.wr": module("pyverbs.wr", SendWR=SendWR, RecvWR=RecvWR, SGE=SGE),
        "pyverbs.cmid": module("pyverbs.cmid", CMID=CMID, AddrInfo=AddrInfo, ConnParam=ConnParam),
        "pyverbs.enums": module("pyverbs.enums", **vars(E)),
        "pyverbs.cm_enums": module("pyverbs.cm_enums", **vars(CE)),
    }


def install(monkeypatch: pytest.MonkeyPatch, fabric: Fabric | None = None) -> Fabric:
    fabric = fabric or Fabric()
    for name, mod in build(fabric).items():
        monkeypatch.setitem(sys.modules, name, mod)
    return fabric
