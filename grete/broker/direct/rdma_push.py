"""Replication push over the ``rdma`` transport, the leader's side (replication.py has the design).

The leader is an rdma client of the follower's broker: one RC queue pair (``RdmaConnection``, the
client library's) to the follower's rdma listener, whose session ring takes the notifications and
whose SENDs bring the credits back. A push is two work requests, neither waited for:

* RDMA WRITE of the slot (header and batches) from a local mirror of the receive region (local slot
  ``s`` is the source of remote slot ``s``, so a slot's source is reused only once its credit has
  come back, i.e. after the follower has read what the NIC wrote from it);
* RDMA WRITE_WITH_IMM of the 32-byte PUSH frame into the next slot of the session ring, the immediate
  naming the ring slot (as a producer's notification does). RC ordering puts the slot's bytes
  before the notification.

Nothing on the event loop waits for a completion: send completions are reaped without blocking
whenever the leader posts or a credit arrives; the queue holds two requests per slot of the
follower's session ring (which bounds the credits of an rdma receive region), and a follower whose
NIC stops completing them fills it, which ends the link (the follower fetches). Credits arrive on the connection's completion channel, a descriptor the event
loop watches.
"""

from __future__ import annotations

import select
from typing import Any

from grete.broker.direct.rdma import RING_SLOTS
from grete.direct.layout import FRAME
from grete.direct.rdma import RdmaConnection, Verbs, parse_endpoint, parse_region, require_device

SPARE_REQUESTS = 8  # send-queue room beyond two requests per ring slot (reaping lags posting a little)


class PushConnection(RdmaConnection):
    """The leader's queue pair to one follower, with its mirror of the receive region."""

    def __init__(self, verbs: Verbs, endpoint: str, mirror_bytes: int) -> None:
        # Two requests per unanswered notification; a follower's ring takes RING_SLOTS of those.
        self.depth = 2 * RING_SLOTS + SPARE_REQUESTS
        self.outstanding = 0
        self._next_frame = 0
        super().__init__(verbs, endpoint, send_depth=self.depth)
        e = verbs.e
        self.mirror = verbs.mr.MR(self.pd, mirror_bytes, e.IBV_ACCESS_LOCAL_WRITE)
        # Notification sources: the n-th notification's is buffer ``n % depth``, rewritten ``depth``
        # posts later at the earliest; fewer than ``depth`` requests are outstanding when one is
        # posted and a queue's completions come in posting order, so by then it has completed.
        self.frames = verbs.mr.MR(self.pd, self.depth * FRAME, e.IBV_ACCESS_LOCAL_WRITE)

    def _reap(self) -> None:
        success = self.v.e.IBV_WC_SUCCESS
        while self.outstanding:
            n, wcs = self.scq.poll(self.depth)
            for wc in wcs[:n]:
                if wc.status != success:
                    raise ConnectionError(f"rdma push failed: completion status {wc.status}")
            self.outstanding -= n
            if n < self.depth:
                return

    def _post(self, opcode: int, mr: Any, local: int, length: int, rkey: int, remote: int, imm: int = 0) -> int:
        """Post one signaled request without waiting for it; its id."""
        if self.outstanding >= self.depth:
            self._reap()
            if self.outstanding >= self.depth:
                raise ConnectionError("the follower's side completes no rdma writes (send queue full)")
        v = self.v
        wr_id = next(self._ids)
        sge = v.wr.SGE(mr.buf + local, length, mr.lkey)
        wr = v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, imm_data=imm, sg=[sge],
                         send_flags=v.e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, remote)
        self.qp.post_send(wr)
        self.outstanding += 1
        return wr_id

    def push_write(self, rkey: int, remote: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        """RDMA WRITE of ``data`` from the mirror at ``offset`` to ``remote``."""
        self.mirror.write(bytes(data), len(data), offset)
        self._post(self.v.e.IBV_WR_RDMA_WRITE, self.mirror, offset, len(data), rkey, remote)

    def notify(self, frame: bytes) -> None:
        """WRITE_WITH_IMM of ``frame`` into the next ring slot (imm: the slot), not waited for."""
        slot = self._ring_next
        self._ring_next = (slot + 1) % self.ring_slots
        source = (self._next_frame % self.depth) * FRAME
        self._next_frame += 1
        self.frames.write(frame, FRAME, source)
        self._post(self.v.e.IBV_WR_RDMA_WRITE_WITH_IMM, self.frames, source, FRAME, self.ring_rkey,
                   self.ring_address + slot * FRAME, imm=slot)

    def completions(self, timeout: float | None) -> list[bytes]:
        """The credits that have arrived, never waiting: called when the completion channel's
        descriptor is readable, whose event is taken and the queue re-armed before it is drained
        (a credit arriving meanwhile raises a new event). With a timeout: the greeting, which
        connecting waits for off the event loop."""
        if timeout != 0:
            return super().completions(timeout)
        self._reap()
        ready, _, _ = select.select([self.channel_fd], [], [], 0)
        if ready:
            self.channel.get_cq_event(self.rcq)
            self.rcq.ack_events(1)
            self.rcq.req_notify()
        self._drain_answers()
        answers, self._answers = self._answers, []
        return answers

    def _disconnect(self) -> None:
        """Nothing: closing destroys the id, whose kernel side sends the DREQ without waiting. On a
        synchronous id ``rdma_disconnect`` waits for the follower's answer (pyverbs holding the
        GIL), up to the CM's timeouts when the follower is gone: not on the leader's event loop."""

    def close(self) -> None:
        for mr in (self.mirror, self.frames):
            mr.close()
        super().close()


class PushRegion:
    """A follower's receive region as the leader writes it: through the connection, once made."""

    def __init__(self, remote: int, rkey: int, length: int) -> None:
        self.remote, self.rkey, self.length = remote, rkey, length
        self.conn: PushConnection | None = None

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        if self.conn is None:
            raise ConnectionError("no rdma connection to the follower yet")
        if offset < 0 or offset + len(data) > self.length:
            raise ValueError(f"[{offset}, {offset + len(data)}) outside the receive region's {self.length} bytes")
        self.conn.push_write(self.rkey, self.remote + offset, offset, data)

    def close(self) -> None:
        pass  # the memory region is the follower's; the mirror goes with the connection


class RdmaPushTransport:
    """What the Pusher asks of a transport, for one follower's registration over rdma. The leader
    writes only where the follower's NIC lets it: the rkey of a region registered for remote write,
    within its bounds (checked here too, and by the NIC)."""

    name = "rdma"

    def __init__(self, verbs: Verbs) -> None:
        require_device(verbs, "replication push over rdma")
        self.verbs = verbs
        self.region: PushRegion | None = None

    def map_region(self, address: str, length: int, *, writable: bool) -> PushRegion:
        remote, rkey, registered = parse_region(address)
        if registered < length:
            raise ValueError(f"{address}: region shorter than {length} bytes")
        self.region = PushRegion(remote, rkey, length)
        return self.region

    def connect(self, endpoint: str) -> PushConnection:
        """Runs off the event loop (it waits for the follower's greeting)."""
        parse_endpoint(endpoint)
        if self.region is None:
            raise ValueError("map the receive region before connecting")
        conn = PushConnection(self.verbs, endpoint, self.region.length)
        self.region.conn = conn
        return conn
