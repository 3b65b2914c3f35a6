"""The ``rdma`` transport: the direct path's one-sided verbs on an RDMA NIC, through pyverbs.

One RC queue pair per client (``connect``), set up through rdma_cm, carries everything: RDMA WRITE
into produce regions, READ of slot regions and segment files, ATOMIC_FETCH_AND_ADD on ordering
words, and the notifications. Because they share the queue pair, RC ordering puts a batch's WRITE
before the notification that follows it, which is what ``write_with_imm`` relies on.

* A notification is an RDMA WRITE_WITH_IMM of the 32-byte NOTIFY frame into the client's session
  ring on the broker (the broker named it in its first message); the immediate is the ring slot.
  Each consumes one receive the broker posted, and the broker posts one again only after reading
  its slot, so the receive queue is the credit: a client ahead of the broker waits in RNR retry
  (``rnr_retry`` 7: forever) instead of overwriting an unread slot.
* Answers come back as 32-byte SENDs into receives this side posts.
* Every verb but a batch's WRITE waits for its own completion; the WRITE stays in flight until the
  notification after it completes (one round trip for both). The client polls its send CQ (a
  client may spin: the paper's clients do) and waits for answers on a completion channel.

pyverbs is imported when an ``rdma`` transport is built, never otherwise: machines without it run
``shm`` unaffected. Addresses the control APIs return: ``rdma://host:port`` for the endpoint and
``rdma:<address>:<rkey>:<length>`` for a region or segment file (a memory region on the broker).
"""

from __future__ import annotations

import importlib
import itertools
import os
import select
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grete.direct import atomics
from grete.direct.layout import FRAME

# The broker's first message on a new connection: session id, the session ring's address, rkey and
# number of slots (the shm transport's HELLO carries only the session id).
RDMA_HELLO = struct.Struct("<qQII8x")
assert RDMA_HELLO.size == FRAME

RECV_DEPTH = 256       # answers this side can hold before the broker's sends wait in RNR retry
STAGING_BYTES = 1 << 20  # local buffer for WRITE sources and READ targets (larger requests go in pieces)
SCRATCH_BYTES = 64     # local buffer for notification frames and fetch-and-add results
RNR_FOREVER = 7        # an RNR retry count of 7 means "retry forever" (InfiniBand spec)
RD_ATOMIC_DEPTH = 1    # outstanding READ/atomic operations per queue pair (one at a time here)


class RdmaUnavailable(ValueError):
    """``rdma`` was asked for where it cannot run (no pyverbs, no device, no needed capability)."""


_MODULES = {"device": "pyverbs.device", "pd": "pyverbs.pd", "mr": "pyverbs.mr", "cq": "pyverbs.cq",
            "qp": "pyverbs.qp", "wr": "pyverbs.wr", "cmid": "pyverbs.cmid", "e": "pyverbs.enums",
            "ce": "pyverbs.cm_enums"}


@dataclass(frozen=True)
class Verbs:
    """The pyverbs modules the transport uses (tests hand in fakes of these objects)."""

    device: Any
    pd: Any
    mr: Any
    cq: Any
    qp: Any
    wr: Any
    cmid: Any
    e: Any
    ce: Any


def load_verbs() -> Verbs:
    try:
        return Verbs(**{name: importlib.import_module(module) for name, module in _MODULES.items()})
    except ImportError as exc:
        raise RdmaUnavailable(f"the rdma transport needs pyverbs (Debian: python3-pyverbs; "
                              f"scripts/install-test-deps makes it importable here): {exc}") from None


def device_names(verbs: Verbs) -> list[str]:
    """The RDMA devices present; rdma-core reports none as an error, here it is an empty list."""
    try:
        found = verbs.device.get_device_list()
    except Exception:  # PyverbsRDMAError: "Failed to get devices list" when there are none
        return []
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in found]


def require_device(verbs: Verbs, who: str) -> None:
    if not device_names(verbs):
        raise RdmaUnavailable(f"{who}: rdma needs an RDMA device and none was found "
                              f"(no NIC, no rdma_rxe/siw link; see docs/direct.md)")


def open_fds() -> dict[str, str]:
    """This process's descriptors and what each refers to."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor, another thread's)
    return found


def opened_fd(before: dict[str, str], kind: str) -> int:
    """The descriptor opened since ``before`` whose target names ``kind``.

    pyverbs (44) does not expose the fd of a completion channel or of an rdma_cm event channel,
    and its calls that read them hold the GIL while they block; so the fd is found here and waited
    on with select / the event loop, and the blocking call is made only once it is readable.
    Targets are compared, not numbers: a number freed since ``before`` (the listing's own
    descriptor) is the one a new descriptor gets."""
    for fd, target in sorted(open_fds().items(), key=lambda item: int(item[0])):
        if kind in target and before.get(fd) != target:
            return int(fd)
    raise RdmaUnavailable(f"no new {kind} descriptor after creating it")


# --- addresses ---------------------------------------------------------------------------------

def format_endpoint(host: str, port: int) -> str:
    return f"rdma://{host}:{port}"


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    if not endpoint.startswith("rdma://"):
        raise ValueError(f"not an rdma endpoint: {endpoint!r}")
    host, _, port = endpoint[len("rdma://"):].rpartition(":")
    return host.strip("[]"), int(port)


def format_region(address: int, rkey: int, length: int) -> str:
    return f"rdma:{address:#x}:{rkey}:{length}"


def parse_region(text: str) -> tuple[int, int, int]:
    scheme, address, rkey, length = text.split(":")
    if scheme != "rdma":
        raise ValueError(f"not an rdma region: {text!r}")
    return int(address, 16), int(rkey), int(length)


# --- the client's connection ---------------------------------------------------------------------

class RdmaConnection:
    """A client's RC queue pair to one broker; also its ``Channel`` (notifications and answers)."""

    def __init__(self, verbs: Verbs, endpoint: str, send_depth: int = 16) -> None:
        v, e = verbs, verbs.e
        self.v = verbs
        host, port = parse_endpoint(endpoint)
        # Synchronous rdma_cm (rdma_create_ep): address and route are resolved here.
        self.cmid = v.cmid.CMID(creator=v.cmid.AddrInfo(dst=host, dst_service=str(port),
                                                        port_space=v.ce.RDMA_PS_TCP))
        ctx = self.cmid.context
        self.atomics = ctx.query_device().atomic_caps != e.IBV_ATOMIC_NONE
        self.pd = v.pd.PD(ctx)
        before = open_fds()
        self.channel = v.cq.CompChannel(ctx)
        self.channel_fd = opened_fd(before, "infinibandevent")
        self.scq = v.cq.CQ(ctx, send_depth, None, None, 0)
        self.rcq = v.cq.CQ(ctx, RECV_DEPTH, None, self.channel, 0)
        cap = v.qp.QPCap(max_send_wr=send_depth, max_recv_wr=RECV_DEPTH, max_send_sge=1, max_recv_sge=1)
        # An external QP (not rdma_cm's): CMID's own QP offers only post_send/recv/read/write, no atomics.
        self.qp = v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq, cap=cap))
        self.recv_mr = v.mr.MR(self.pd, RECV_DEPTH * FRAME, e.IBV_ACCESS_LOCAL_WRITE)
        self.staging = v.mr.MR(self.pd, STAGING_BYTES, e.IBV_ACCESS_LOCAL_WRITE)  # batches, reads
        self.scratch = v.mr.MR(self.pd, SCRATCH_BYTES, e.IBV_ACCESS_LOCAL_WRITE)  # notifications, atomics
        self._ids = itertools.count(1)
        self._in_flight = 0  # a WRITE posted and not yet seen complete: the staging buffer is its
        self._answers: list[bytes] = []
        self._move(e.IBV_QPS_INIT)
        for slot in range(RECV_DEPTH):
            self._post_recv(slot)  # before connecting: the broker's first message is a SEND
        self.cmid.connect(v.cmid.ConnParam(resources=RD_ATOMIC_DEPTH, depth=RD_ATOMIC_DEPTH,
                                           rnr_retry=RNR_FOREVER, qp_num=self.qp.qp_num))
        self._move(e.IBV_QPS_RTR)
        self._move(e.IBV_QPS_RTS)
        self.cmid.establish()
        self.rcq.req_notify()
        hello = self._wait_answer(30.0)
        self.session_id, self.ring_address, self.ring_rkey, self.ring_slots = RDMA_HELLO.unpack(hello)
        self._ring_next = 0

    def _move(self, state: int) -> None:
        """One QP state transition, with the attributes rdma_cm negotiated for this connection."""
        attr, mask = self.cmid.init_qp_attr(state)
        self.qp.modify(attr, mask)

    def _post_recv(self, slot: int) -> None:
        v = self.v
        sge = v.wr.SGE(self.recv_mr.buf + slot * FRAME, FRAME, self.recv_mr.lkey)
        self.qp.post_recv(v.wr.RecvWR(wr_id=slot, num_sge=1, sg=[sge]))

    # --- one-sided operations ---------------------------------------------------------------------
    def post(self, opcode: int, length: int, rkey: int, remote: int, *, mr: Any = None, imm: int = 0,
             add: int | None = None, wait: bool = True) -> int:
        """Post one signaled work request from/to the start of ``mr`` (the staging buffer by default)."""
        v = self.v
        mr = self.staging if mr is None else mr
        wr_id = next(self._ids)
        sge = v.wr.SGE(mr.buf, length, mr.lkey)
        wr = v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, imm_data=imm, sg=[sge],
                         send_flags=v.e.IBV_SEND_SIGNALED)
        if add is None:
            wr.set_wr_rdma(rkey, remote)
        else:
            wr.set_wr_atomic(rkey, remote, add, 0)  # compare_add is the addend of a fetch-and-add
        self.qp.post_send(wr)
        if wait:
            self._wait_send(wr_id)
        return wr_id

    def _wait_send(self, wr_id: int) -> None:
        """Poll the send CQ until ``wr_id`` completes (completions come in posting order, so an
        earlier write left in flight completes on the way)."""
        success = self.v.e.IBV_WC_SUCCESS
        while True:
            n, wcs = self.scq.poll(1)
            for wc in wcs[:n]:
                if wc.status != success:
                    raise ConnectionError(f"rdma operation failed: completion status {wc.status}")
                if wc.wr_id == self._in_flight:
                    self._in_flight = 0
                if wc.wr_id == wr_id:
                    return

    def _staging_free(self) -> None:
        if self._in_flight:
            self._wait_send(self._in_flight)

    def write(self, rkey: int, remote: int, data: bytes | bytearray | memoryview) -> None:
        """WRITE ``data``; the last piece is left in flight: the operation that follows (the
        notification) is waited for, and its completion implies this one's, so a produce costs one
        round trip for both. The staging buffer stays untouched until then."""
        view = memoryview(data).cast("B")
        for start in range(0, len(view), STAGING_BYTES):
            piece = bytes(view[start:start + STAGING_BYTES])
            self._staging_free()
            self.staging.write(piece, len(piece), 0)
            self._in_flight = self.post(self.v.e.IBV_WR_RDMA_WRITE, len(piece), rkey, remote + start, wait=False)

    def read(self, rkey: int, remote: int, length: int) -> bytes:
        out = []
        self._staging_free()
        for start in range(0, length, STAGING_BYTES):
            n = min(STAGING_BYTES, length - start)
            self.post(self.v.e.IBV_WR_RDMA_READ, n, rkey, remote + start)
            out.append(self.staging.read(n, 0))
        return b"".join(out)

    def fetch_add(self, rkey: int, remote: int, delta: int) -> int:
        if not self.atomics:
            raise RdmaUnavailable("this RDMA device has no remote atomics (shared direct producers "
                                  "need fetch-and-add; use direct.producer.mode=exclusive)")
        self.post(self.v.e.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, rkey, remote, mr=self.scratch, add=delta & (2**64 - 1))
        return int.from_bytes(self.scratch.read(8, 0), "little")

    # --- Channel --------------------------------------------------------------------------------
    def notify(self, frame: bytes) -> None:
        """WRITE_WITH_IMM of the frame into the next slot of this session's ring; imm: the slot."""
        slot = self._ring_next
        self._ring_next = (slot + 1) % self.ring_slots
        self.scratch.write(frame, FRAME, 0)
        self.post(self.v.e.IBV_WR_RDMA_WRITE_WITH_IMM, FRAME, self.ring_rkey, self.ring_address + slot * FRAME,
                  mr=self.scratch, imm=slot)
        # Take the answers that have come (re-posting their receives): a producer that keeps
        # producing keeps the broker's answers flowing even if it calls poll() rarely.
        self._drain_answers()

    def _drain_answers(self) -> None:
        v = self.v
        while True:
            n, wcs = self.rcq.poll(RECV_DEPTH)
            for wc in wcs[:n]:
                if wc.status != v.e.IBV_WC_SUCCESS:
                    raise ConnectionError(f"the broker closed the rdma connection (status {wc.status})")
                self._answers.append(self.recv_mr.read(FRAME, wc.wr_id * FRAME))
                self._post_recv(wc.wr_id)
            if n < RECV_DEPTH:
                return

    def _wait_answer(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            answers = self.completions(left)  # may come back empty early: an event already drained
            if answers:
                self._answers = answers[1:] + self._answers
                return answers[0]
        raise ConnectionError("no answer from the broker on the rdma connection")

    def completions(self, timeout: float | None) -> list[bytes]:
        """Answers that have arrived; waits up to ``timeout`` seconds for the first (None: forever)
        on the completion channel, re-armed before the last poll so no completion is missed."""
        self._drain_answers()
        if not self._answers and timeout != 0:
            ready, _, _ = select.select([self.channel_fd], [], [], timeout)
            if ready:
                self.channel.get_cq_event(self.rcq)
                self.rcq.ack_events(1)
                self.rcq.req_notify()
                self._drain_answers()
        answers, self._answers = self._answers, []
        return answers

    def fileno(self) -> int:
        return self.channel_fd

    def _disconnect(self) -> None:
        try:
            self.cmid.disconnect()
        except Exception:  # already gone (the broker closed first)
            pass

    def close(self) -> None:
        self._disconnect()
        for obj in (self.qp, self.recv_mr, self.staging, self.scratch, self.scq, self.rcq, self.channel, self.pd, self.cmid):
            obj.close()


class RdmaRegion:
    """A broker's memory region (produce region or slot region) seen through the connection."""

    def __init__(self, conn: RdmaConnection, address: str, length: int) -> None:
        self._conn = conn
        self._remote, self._rkey, registered = parse_region(address)
        if registered < length:
            raise ValueError(f"{address}: region shorter than {length} bytes")
        self.length = length

    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or offset + length > self.length:
            raise ValueError(f"[{offset}, {offset + length}) outside the region's {self.length} bytes")

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._check(offset, len(data))
        self._conn.write(self._rkey, self._remote + offset, data)

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        return self._conn.read(self._rkey, self._remote + offset, length)

    def copy(self, offset: int, length: int) -> bytearray:
        return bytearray(self.read(offset, length))

    def fetch_add(self, offset: int, delta: int) -> int:
        self._check(offset, 8)
        return self._conn.fetch_add(self._rkey, self._remote + offset, delta)

    def load(self, offset: int) -> int:
        return int.from_bytes(self.read(offset, 8), "little")

    def store(self, offset: int, value: int) -> None:
        self.write(offset, (value & (2**64 - 1)).to_bytes(8, "little"))

    def snapshot_into(self, dst: Any, slots: int, slot_size: int) -> bool:
        """The slot prefix in one READ, checked by a second: a slot is consistent when its sequence
        word is even and the same in both (no broker write began between reading it and its
        fields). False: the broker was writing, try again."""
        n = slots * slot_size
        first = self.read(0, n)
        second = self.read(0, n)
        for pos in range(0, n, slot_size):
            seq = first[pos:pos + 8]
            if seq != second[pos:pos + 8] or seq[0] & 1:
                return False
        atomics.ffi().buffer(dst)[0:n] = first
        return True

    def changed_check(self, dst: Any, slots: int, slot_size: int) -> Callable[[], int]:
        """The empty poll: one READ of the slot prefix, compared with the last snapshot."""
        n = slots * slot_size
        last = atomics.ffi().buffer(dst)
        return lambda: int(self.read(0, n) != last[0:n])

    def close(self) -> None:
        pass  # the memory region is the broker's; it deregisters it


class RdmaFileReader:
    """READs of a segment file the broker registered (an on-demand-paging MR over its mapping)."""

    def __init__(self, conn: RdmaConnection, address: str) -> None:
        self._conn = conn
        self._remote, self._rkey, self._length = parse_region(address)

    def read(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self._length - position))
        return self._conn.read(self._rkey, self._remote + position, length) if length else b""

    def close(self) -> None:
        pass


class RdmaTransport:
    """``direct.transport=rdma``: one connection per client, regions and files read through it."""

    name = "rdma"

    def __init__(self, verbs: Verbs | None = None) -> None:
        self.verbs = verbs if verbs is not None else load_verbs()
        require_device(self.verbs, "direct.transport=rdma")
        self._conn: RdmaConnection | None = None

    def _connection(self) -> RdmaConnection:
        if self._conn is None:
            raise RuntimeError("rdma transport: connect() to the broker's endpoint first")
        return self._conn

    def connect(self, endpoint: str) -> RdmaConnection:
        if not endpoint.startswith("rdma://"):
            raise RdmaUnavailable("direct.transport=rdma: the broker does not offer the rdma transport "
                                  "(its direct.transports has no rdma)")
        self._conn = RdmaConnection(self.verbs, endpoint)
        return self._conn

    def map_region(self, address: str, length: int, *, writable: bool) -> RdmaRegion:
        return RdmaRegion(self._connection(), address, length)

    def open_file(self, address: str) -> RdmaFileReader:
        return RdmaFileReader(self._connection(), address)
