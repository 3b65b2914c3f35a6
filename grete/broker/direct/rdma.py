"""The broker's side of the rdma transport (grete/direct/rdma.py is the client's).

* An rdma_cm listener on ``direct.rdma.address:direct.rdma.port``; each accepted connection gets
  an RC queue pair of the broker's (an external QP: rdma_cm's own offers no atomics), moved through
  INIT/RTR/RTS with the attributes rdma_cm negotiated, a session ring (a memory region clients
  WRITE_WITH_IMM their 32-byte notifications into) and a small send buffer for answers.
* Memory regions over what the shm transport maps: produce regions (remote write, read and atomic:
  producers write batches, read the sealed word, fetch-and-add the ordering word), consumers' slot
  regions (remote read) and segment files (remote read, on-demand paging over a mapping as long as a
  segment may grow, since the file grows after registration).
* One completion queue for all sessions, on a completion channel whose descriptor joins the event
  loop: a readable channel means completions; nothing polls while there is nothing to do.

Each session is a ``Session`` of DirectService, like a ``notify.sock`` connection: its grants and
consumer slots end with it. A memory region is deregistered a grace period after the broker lets it
go (a sealed region, a closed consumer, a deleted segment), so a client that read the sealed or
deleted flag just before gets its last answer rather than a remote access error.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import mmap
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from grete.direct.layout import FRAME
from grete.direct.rdma import (
    RD_ATOMIC_DEPTH,
    RDMA_HELLO,
    RNR_FOREVER,
    RdmaUnavailable,
    Verbs,
    format_endpoint,
    format_region,
    open_fds,
    opened_fd,
    require_device,
)

log = logging.getLogger(__name__)

RING_SLOTS = 128       # notifications a session may have in flight (the receives posted for it)
SEND_SLOTS = 256       # answers a session may leave unacknowledged before it is closed
PER_SESSION = RING_SLOTS + SEND_SLOTS  # completions one session can have outstanding on the shared CQ
CQ_DEPTH = 65536       # wanted; the device's max_cqe may be less, and sessions are capped to fit
POLL_BATCH = 64
# Segment files are mapped (and registered) this long: Kafka's segments stay below 2 GiB (int32
# positions), and on-demand paging makes the part past the file's end cost nothing until read.
SEGMENT_MAP_BYTES = 1 << 31


@dataclass
class Hooks:
    """What the endpoint reports to DirectService."""

    opened: Callable[[RdmaSession], int]      # a new session: its id
    closed: Callable[[int], None]
    notified: Callable[[int, bytes], None]  # session, the 32-byte frame (NOTIFY, or a leader's PUSH)


class RdmaSession:
    """One client's connection: its queue pair, ring and answer buffer."""

    def __init__(self, endpoint: RdmaEndpoint, cmid: Any, qp: Any, ring: Any, send_mr: Any, cm_fd: int) -> None:
        self.endpoint = endpoint
        self.cmid, self.qp, self.ring, self.send_mr, self.cm_fd = cmid, qp, ring, send_mr, cm_fd
        self.id = -1
        self.closed = False
        self._next_send = 0
        self._unacked = 0  # answers posted whose completion has not come back

    def reply(self, frame: bytes) -> None:
        if self.closed:
            return
        if self._unacked >= SEND_SLOTS:
            # A client that does not take its answers (its receives are not re-posted): its session
            # ends, as a notify.sock client with too many unread answers does.
            log.warning("direct rdma session %d: %d answers unacknowledged; closing it", self.id, self._unacked)
            self.endpoint.close_session(self, "answers not taken")
            return
        v = self.endpoint.verbs
        slot = self._next_send
        self._next_send = (slot + 1) % SEND_SLOTS
        self.send_mr.write(frame, FRAME, slot * FRAME)
        sge = v.wr.SGE(self.send_mr.buf + slot * FRAME, FRAME, self.send_mr.lkey)
        self.qp.post_send(v.wr.SendWR(wr_id=slot, opcode=v.e.IBV_WR_SEND, num_sge=1, sg=[sge],
                                      send_flags=v.e.IBV_SEND_SIGNALED))
        self._unacked += 1

    def sent(self) -> None:
        self._unacked -= 1

    def repost(self, slot: int) -> None:
        """The ring slot has been read: one more notification may come (its receive carries no
        data: WRITE_WITH_IMM puts the frame into the ring, the receive only yields the immediate)."""
        self.qp.post_recv(self.endpoint.verbs.wr.RecvWR(wr_id=slot, num_sge=0))

    def close(self) -> None:
        self.endpoint.close_session(self, "broker closing it")


class RdmaEndpoint:
    def __init__(self, verbs: Verbs, host: str, port: int, hooks: Hooks, grace_s: float) -> None:
        self.verbs = verbs
        self.host, self.port = host, port
        self.endpoint = format_endpoint(host, port)
        self.hooks = hooks
        self.grace_s = grace_s
        self.sessions: dict[int, RdmaSession] = {}  # by queue pair number (what a completion names)
        # key -> (MR, address, length, whether the endpoint mapped it itself and unmaps it)
        self._mrs: dict[Hashable, tuple[Any, int, int, bool]] = {}
        self._retiring: list[tuple[Any, int, int, bool]] = []  # released, deregistered after the grace
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fds: list[int] = []

    # --- start and stop ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Raises RdmaUnavailable with the reason when this broker cannot serve rdma."""
        v, e = self.verbs, self.verbs.e
        require_device(v, "direct.transports=rdma")
        if not self.host:
            raise RdmaUnavailable("direct.transports=rdma needs direct.rdma.address: the IP address of an "
                                  "RDMA device's interface to listen on")
        before = open_fds()
        self.listen_id = v.cmid.CMID(creator=v.cmid.AddrInfo(src=self.host, src_service=str(self.port),
                                                             port_space=v.ce.RDMA_PS_TCP,
                                                             flags=v.ce.RAI_PASSIVE))
        self.listen_id.listen(64)
        self.listen_fd = opened_fd(before, "rdma_cm")
        ctx = self.listen_id.context
        odp = ctx.query_device_ex().odp_caps
        if not (odp.general_caps & e.IBV_ODP_SUPPORT and odp.rc_odp_caps & e.IBV_ODP_SUPPORT_READ):
            raise RdmaUnavailable("direct.transports=rdma: the device has no on-demand paging for RC "
                                  "reads, which the broker's growing segment files are registered with")
        self.pd = v.pd.PD(ctx)
        before = open_fds()
        self.channel = v.cq.CompChannel(ctx)
        self.channel_fd = opened_fd(before, "infinibandevent")
        depth = min(CQ_DEPTH, ctx.query_device().max_cqe)
        # A CQ that overflows breaks every queue pair on it: no more sessions than it can hold.
        self.max_sessions = depth // PER_SESSION
        if self.max_sessions < 1:
            raise RdmaUnavailable(f"direct.transports=rdma: the device's completion queues hold {depth} "
                                  f"entries, fewer than one session needs ({PER_SESSION})")
        self.cq = v.cq.CQ(ctx, depth, None, self.channel, 0)
        self.cq.req_notify()
        self._loop = loop
        loop.add_reader(self.listen_fd, self._accept)
        loop.add_reader(self.channel_fd, self._on_cq_event)
        self._fds = [self.listen_fd, self.channel_fd]
        log.info("direct rdma transport listening on %s", self.endpoint)

    def stop(self) -> None:
        for session in list(self.sessions.values()):
            self.close_session(session, "broker stopping")
        if self._loop is not None:
            for fd in self._fds:
                self._loop.remove_reader(fd)
        for found in [*self._mrs.values(), *self._retiring]:
            self._close(found)
        self._mrs.clear()
        self._retiring.clear()
        for name in ("cq", "channel", "pd", "listen_id"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()

    # --- connections --------------------------------------------------------------------------------
    def _move(self, cmid: Any, qp: Any, state: int) -> None:
        attr, mask = cmid.init_qp_attr(state)
        qp.modify(attr, mask)

    def _accept(self) -> None:
        v, e = self.verbs, self.verbs.e
        before = open_fds()
        try:
            cmid = self.listen_id.get_request()
        except Exception as exc:  # a request that went away before we took it
            log.info("direct rdma: connection request failed: %s", exc)
            return
        try:
            cm_fd = opened_fd(before, "rdma_cm")  # the new connection's own event channel
        except RdmaUnavailable:
            cm_fd = -1
        if len(self.sessions) >= self.max_sessions:
            log.warning("direct rdma: %d sessions, the most the completion queue holds; refusing a connection",
                        len(self.sessions))
            cmid.reject()
            cmid.close()
            return
        made: list[Any] = []  # what to close again if the connection cannot be set up
        try:
            cap = v.qp.QPCap(max_send_wr=SEND_SLOTS, max_recv_wr=RING_SLOTS, max_send_sge=1, max_recv_sge=1)
            qp = v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
            made.append(qp)
            ring = v.mr.MR(self.pd, RING_SLOTS * FRAME, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
            made.append(ring)
            send_mr = v.mr.MR(self.pd, SEND_SLOTS * FRAME, e.IBV_ACCESS_LOCAL_WRITE)
            made.append(send_mr)
            session = RdmaSession(self, cmid, qp, ring, send_mr, cm_fd)
            self._move(cmid, qp, e.IBV_QPS_INIT)
            for slot in range(RING_SLOTS):
                session.repost(slot)
            self._move(cmid, qp, e.IBV_QPS_RTR)
            cmid.accept(v.cmid.ConnParam(resources=RD_ATOMIC_DEPTH, depth=RD_ATOMIC_DEPTH,
                                         rnr_retry=RNR_FOREVER, qp_num=qp.qp_num))
            self._move(cmid, qp, e.IBV_QPS_RTS)
        except Exception as exc:
            log.warning("direct rdma: could not accept a connection: %s", exc)
            for obj in [*made, cmid]:
                obj.close()
            return
        self.sessions[qp.qp_num] = session
        session.id = self.hooks.opened(session)
        session.reply(RDMA_HELLO.pack(session.id, ring.buf, ring.rkey, RING_SLOTS))
        if cm_fd >= 0 and self._loop is not None:
            # After establishment the only events on a connection's channel are its end
            # (DISCONNECTED, DEVICE_REMOVAL): readable means the client is gone.
            self._loop.add_reader(cm_fd, self.close_session, session, "disconnected")

    def close_session(self, session: RdmaSession, why: str) -> None:
        if session.closed:
            return
        session.closed = True
        if session.cm_fd >= 0 and self._loop is not None:
            self._loop.remove_reader(session.cm_fd)
        self.sessions.pop(session.qp.qp_num, None)
        self.hooks.closed(session.id)
        try:
            session.cmid.disconnect()
        except Exception:  # the client went first
            pass
        for obj in (session.qp, session.ring, session.send_mr, session.cmid):
            obj.close()
        log.debug("direct rdma session %d closed: %s", session.id, why)

    # --- completions ------------------------------------------------------------------------------
    def _on_cq_event(self) -> None:
        """The channel is readable: take the event, re-arm, then poll until the CQ is empty (re-armed
        first, so a completion arriving during the poll raises a new event rather than waiting)."""
        self.channel.get_cq_event(self.cq)
        self.cq.ack_events(1)
        self.cq.req_notify()
        while True:
            n, wcs = self.cq.poll(POLL_BATCH)
            for wc in wcs[:n]:
                self._completion(wc)
            if n < POLL_BATCH:
                return

    def _completion(self, wc: Any) -> None:
        e = self.verbs.e
        session = self.sessions.get(wc.qp_num)
        if session is None:
            # A work request of a session already closed. (Its QP is destroyed without draining
            # the flushed ones first; a QP number reused at once could see one: that session
            # would end and its client re-register, as after any lost connection.)
            return
        if wc.status != e.IBV_WC_SUCCESS:
            self.close_session(session, f"completion status {wc.status}")
        elif wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM:
            slot = wc.imm_data
            if not 0 <= slot < RING_SLOTS:
                self.close_session(session, f"immediate {slot} names no ring slot")
                return
            frame = session.ring.read(FRAME, slot * FRAME)
            session.repost(slot)
            self.hooks.notified(session.id, frame)
        elif wc.opcode == e.IBV_WC_SEND:
            session.sent()
        else:  # a plain SEND from a client: no part of the protocol
            self.close_session(session, f"unexpected completion opcode {wc.opcode}")

    # --- memory regions -------------------------------------------------------------------------------
    def register(self, key: Hashable, address: int, length: int, access: int, mapped: bool = False) -> str:
        """A memory region over ``[address, address + length)`` (idempotent per key): its address text."""
        if key not in self._mrs:
            self._mrs[key] = (self.verbs.mr.MR(self.pd, length, access, address=address), address, length, mapped)
        mr, address, length, _ = self._mrs[key]
        return format_region(address, mr.rkey, length)

    def register_region(self, key: Hashable, address: int, length: int, *, produce: bool) -> str:
        e = self.verbs.e
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                  | e.IBV_ACCESS_REMOTE_ATOMIC) if produce else e.IBV_ACCESS_REMOTE_READ
        return self.register(key, address, length, access)

    def register_file(self, path: str) -> str:
        """A segment file, read-only, mapped SEGMENT_MAP_BYTES long (on-demand paging)."""
        if path in self._mrs:
            return self.register(path, 0, 0, 0)  # already registered: its address and key
        e = self.verbs.e
        address = map_file(path, SEGMENT_MAP_BYTES)
        try:
            return self.register(path, address, SEGMENT_MAP_BYTES,
                                 e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_ON_DEMAND, mapped=True)
        except Exception:
            unmap(address, SEGMENT_MAP_BYTES)
            raise

    def registered(self) -> list[Hashable]:
        return list(self._mrs)

    def release(self, key: Hashable, grace: bool = True) -> None:
        """Deregister ``key`` after the grace period (clients that just read a flag finish first);
        registering the key again meanwhile makes a new memory region. ``grace=False``: at once
        (the memory is about to be unmapped)."""
        found = self._mrs.pop(key, None)
        if found is None:
            return
        if not grace:
            self._close(found)
            return
        self._retiring.append(found)
        if self._loop is not None:
            self._loop.call_later(self.grace_s, self._deregister, found)

    def _deregister(self, found: tuple[Any, int, int, bool]) -> None:
        if found not in self._retiring:
            return  # stop() got there first: unmapping again could hit a mapping made since
        self._retiring.remove(found)
        self._close(found)

    @staticmethod
    def _close(found: tuple[Any, int, int, bool]) -> None:
        mr, address, length, mapped = found
        mr.close()
        if mapped:
            unmap(address, length)


# --- mappings longer than the file (Python's mmap refuses those) ------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


def map_file(path: str, length: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if address in (None, MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap {path}: {os.strerror(err)}")
    return int(address)


def unmap(address: int, length: int) -> None:
    _libc.munmap(address, length)
