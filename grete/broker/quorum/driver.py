"""The Raft core on the network: one KRaft voter of a controller quorum, as Kafka's KafkaRaftClient.

The core (grete.coordinator.kraft.raft) decides; this driver gives it time, disk and sockets:
- it wakes the core for a message, an append, or the core's own next deadline (a timer handle on the
  event loop, moved whenever the deadline moves) and never polls;
- what an input changed is made durable before anything is sent: ``quorum-state`` written, the
  metadata log flushed; only then go the messages out and does the high watermark publish;
- requests to other voters go over one connection each (PeerConnection, the controller listener of
  ``controller.quorum.voters``); their answers come back to the core as inputs. A voter that cannot
  be reached is an unanswered request: the core retries it after its request timeout;
- requests from other voters (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of ``__cluster_metadata``)
  reach ``handle``, which waits for the core's answer: a fetch with nothing new is parked by the core
  until records arrive or its max wait passes (the long poll), so an idle quorum sends about two
  fetches a second per follower.
Committed batches (below the high watermark) are handed to ``on_commit`` in order, once each.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.quorum.addresses import AddressBook, VoterAddress
from grete.coordinator.kraft import raft_messages as core
from grete.coordinator.kraft.quorum import QUORUM_STATE_FILE, read_quorum_state, write_quorum_state
from grete.coordinator.kraft.raft import NEVER, RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import BOOTSTRAP_SNAPSHOT, OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.raft_segment_log import SegmentRaftLog
from grete.coordinator.kraft.raft_snapshots import SnapshotPolicy
from grete.coordinator.kraft.raft_wire import Addressing, from_wire, node_endpoints, to_wire
from grete.coordinator.kraft.voters import VoterHistory, VoterNode, VoterSet
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import KRaftVersionRecord, VotersRecord
from grete.protocol.metadata_frame import encode_metadata_record
from grete.storage.checkpoint_file import CheckpointError
from grete.storage.config import LogConfig
from grete.storage.failure import describe
from grete.storage.log import Log

log = logging.getLogger(__name__)
CLUSTER_ID_LOG_EVERY_S = 60.0

PROBE_TIMEOUT_S = 0.5  # a connection probe of a voter whose connection ended
# The versions this voter sends (Kafka 4.3.1's; Vote v2 carries KIP-996's pre-vote).
REQUEST_VERSIONS = {core.VoteRequest: 2, core.BeginQuorumEpochRequest: 1, core.EndQuorumEpochRequest: 1,
                    core.FetchRequest: 18, core.FetchSnapshotRequest: 1, core.UpdateVoterRequest: 0}
_RESPONSES = (core.VoteResponse, core.BeginQuorumEpochResponse, core.EndQuorumEpochResponse, core.FetchResponse,
              core.FetchSnapshotResponse, core.UpdateVoterResponse)


def voter_history(log: SegmentRaftLog, static: dict[int, VoterAddress]) -> VoterHistory:
    """Where the voter sets start: a static quorum's configured voters, or the snapshot the log
    starts at: a dynamic quorum's bootstrap snapshot (the format step's ``--standalone`` /
    ``--initial-controllers``) or a later one that replaced the log before it. A replica formatted
    without one (a broker, a controller to be added) starts with no voters and learns them from the
    leader's log."""
    if static:
        return VoterHistory(VoterSet.of_ids(static))
    at_start = [s for s in log.snapshots.ids if s.offset == log.start_offset]
    if not at_start:
        return VoterHistory(VoterSet({}), 0)
    return VoterHistory(*snapshot_voters(read_snapshot(log, at_start[-1])[0]))


def read_snapshot(log: SegmentRaftLog, snapshot: OffsetAndEpoch) -> tuple[list[Message], list[bytes]]:
    """A snapshot's control records and metadata records; CORRUPT_MESSAGE naming the file if it is
    not a whole snapshot."""
    try:
        return log.snapshots.load(snapshot)
    except (CheckpointError, OSError) as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{log.snapshots.path(snapshot)}: {exc}") from None


def snapshot_voters(controls: list[Message]) -> tuple[VoterSet, int]:
    voters, version = VoterSet({}), 0
    for message in controls:
        if isinstance(message, VotersRecord):
            voters = VoterSet.from_record(message)
        elif isinstance(message, KRaftVersionRecord):
            version = message.k_raft_version
    return voters, version


async def _refuses(peer: PeerConnection) -> bool:
    """Whether the peer's port refuses a new connection now: its process is gone (a live process,
    even a paused one, has the kernel accept for it; a silent host times out instead)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(peer.host, peer.port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False


def _now_ms() -> int:
    return int(time.time() * 1000)


class RaftDriver:
    def __init__(self, node_id: int, voters: dict[int, VoterAddress], partition_dir: Path, cluster_id: str,
                 config: RaftConfig, on_commit: Callable[[RaftBatch], None], listener: str = "CONTROLLER",
                 bootstrap: dict[int, VoterAddress] | None = None, local: VoterNode | None = None,
                 snapshots: SnapshotPolicy | None = None, log_config: LogConfig | None = None) -> None:
        """``voters``: a static quorum's (controller.quorum.voters), empty for a dynamic one, whose
        replicas start from ``bootstrap`` (controller.quorum.bootstrap.servers) and the voter set
        of the log. ``local``: this node as a voter set lists it (a controller's key and endpoints)."""
        self.node_id = node_id
        self.listener = listener  # the controller listener's name, as DescribeQuorum names endpoints
        self.cluster_id = cluster_id
        self.partition_dir = partition_dir
        self.log = SegmentRaftLog(partition_dir, log_config)
        self.addresses = AddressBook(listener, voters, bootstrap or {})
        stored = read_quorum_state(partition_dir / QUORUM_STATE_FILE)
        self.raft = RaftNode(node_id, voter_history(self.log, voters), self.log, stored, _now_ms(),
                             random.Random(), config, local=local, bootstrap=sorted(bootstrap or {}, reverse=True))
        self.addresses.voter_set(self.raft.history.latest)
        self.request_timeout_s = config.request_timeout_ms / 1000
        # Told every committed batch in log order: the controller's state, and on a combined node the
        # broker's image too (grete/broker/quorum/combined.py).
        self.commit_listeners: list[Callable[[RaftBatch], None]] = [on_commit]
        self._applied = self.log.start_offset  # the next offset to hand to on_commit
        self._applied_epoch = 0  # the epoch of the record before it
        # Snapshots of the state: written by ``snapshot_source`` (the node's image as records) when
        # the policy says, loaded through ``snapshot_listeners`` (at start, and after a FetchSnapshot).
        self.snapshot_policy = snapshots or SnapshotPolicy()
        self.snapshot_source: Callable[[], list[Message]] | None = None
        self._snapshotting: asyncio.Task[None] | None = None  # a snapshot being written
        self.snapshot_listeners: list[Callable[[int, list[bytes]], None]] = []
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = _now_ms()
        self._snapshot_timer: asyncio.TimerHandle | None = None
        self._peers: dict[int, PeerConnection] = {}
        self._answers: dict[tuple[int, int], asyncio.Future[core.RaftResponse]] = {}
        self._commits: list[tuple[int, asyncio.Future[None]]] = []  # (offset, committed once past it)
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._reported_gone: tuple[int, int] | None = None  # (leader, epoch) last seen gone
        self._cluster_id_refused_at = -CLUSTER_ID_LOG_EVERY_S  # when INCONSISTENT_CLUSTER_ID was last logged
        self.leadership_listeners: list[Callable[[bool], None]] = []  # told whether this voter leads
        # Told once if the metadata log's dir fails: the node cannot follow the quorum any more and
        # stops, as Kafka's does (a metadata log dir failure is fatal, KIP-858).
        self.failure_listeners: list[Callable[[str], None]] = []
        self.log.log.on_storage_error = self._log_failed

    # --- inputs ---------------------------------------------------------------------------------
    def start(self) -> None:
        latest = self.log.latest_snapshot()
        if latest is not None and latest != BOOTSTRAP_SNAPSHOT:
            values = read_snapshot(self.log, latest)[1]
            log.info("metadata quorum: starting from snapshot %s (%d records), the log from offset %d after it",
                     self.log.snapshots.path(latest).name, len(values), latest.offset)
            self._load(latest, values)  # the state at it; the log after it follows
        self._run(self.raft.tick(_now_ms()))

    async def handle(self, sender: int, request: core.RaftRequest) -> core.RaftResponse:
        """The core's answer to a request from another replica."""
        if self._closed:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the metadata quorum is shutting down")
        if isinstance(request, core.VoteRequest) and request.pre_vote:
            self._check_leader(sender)
        key = (sender, request.correlation_id)
        stale = self._answers.pop(key, None)
        if stale is not None:
            stale.cancel()
        answer: asyncio.Future[core.RaftResponse] = asyncio.get_running_loop().create_future()
        self._answers[key] = answer
        self._run(self.raft.receive(sender, request, _now_ms()))
        try:
            return await answer
        finally:
            self._answers.pop(key, None)

    async def append(self, values: list[bytes]) -> int:
        """Append ``values`` as one batch of this leader's epoch; its last offset once committed.
        NOT_CONTROLLER when this voter does not lead."""
        try:
            out = self.raft.append(values, _now_ms())
        except KafkaError:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum") from None
        return await self.committed(out)

    async def change_voters(self, change: Callable[[int], core.RaftOutput], ack_when_committed: bool = True) -> int:
        """A voter change of the core (raft_reconfig: its refusals raise KafkaError as they are);
        the offset of what it appended, once committed unless ``ack_when_committed`` is false."""
        if self._closed:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the metadata quorum is shutting down")
        return await self.committed(change(_now_ms()), wait=ack_when_committed)

    async def committed(self, out: core.RaftOutput, wait: bool = True) -> int:
        """Run the core's output of an append; the appended batch's last offset, once committed."""
        last = self.log.end_offset - 1
        if not wait:
            self._run(out)
            return last
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if last < self.raft.high_watermark:
            done.set_result(None)  # nothing new appended (a change that changed nothing)
        else:
            self._commits.append((last, done))
        self._run(out)
        await done
        return last

    def _tick(self) -> None:
        self._timer = None
        if not self._closed:
            self._run(self.raft.tick(_now_ms()))

    # --- outputs --------------------------------------------------------------------------------
    def _run(self, out: core.RaftOutput) -> None:
        if out.quorum_state is not None:
            write_quorum_state(self.partition_dir / QUORUM_STATE_FILE, out.quorum_state)
        if out.log_changes:
            self.log.flush()
            if any(isinstance(change, core.LogTruncated) for change in out.log_changes):
                self._applied = min(self._applied, self.log.end_offset)
        if out.snapshot_loaded is not None:
            self._install(out.snapshot_loaded)
        if out.log_changes:
            self.addresses.voter_set(self.raft.history.latest)
        if out.leader_changed:
            log.info("metadata quorum: epoch %d, leader %s, this node %s", self.raft.epoch,
                     self.raft.leader_id, self.raft.role)
            self._fail_commits()
            for listener in self.leadership_listeners:
                listener(self.leads)
        for destination, message in out.messages:
            if isinstance(message, _RESPONSES):
                answer = self._answers.pop((destination, message.correlation_id), None)
                if answer is not None and not answer.done():
                    answer.set_result(message)
            else:
                self._send(destination, message)
        if out.high_watermark is not None:
            self._publish(out.high_watermark)
        self._schedule()

    def _schedule(self) -> None:
        now = _now_ms()
        deadline = self.raft.next_deadline(now)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline < NEVER and not self._closed:
            loop = asyncio.get_running_loop()
            delay = max(deadline - now, 0) / 1000
            self._timer = loop.call_later(delay, self._tick)

    def _publish(self, high_watermark: int) -> None:
        """Hand every batch wholly below the high watermark to on_commit, in order, once."""
        while self._applied < high_watermark:
            progressed = False
            for batch in self.log.read(self._applied, 1000):
                if batch.next_offset > high_watermark:
                    break
                if batch.next_offset > self._applied:
                    for listener in self.commit_listeners:
                        listener(batch)
                    self._applied, self._applied_epoch = batch.next_offset, batch.epoch
                    self._bytes_since_snapshot += len(batch.raw) if batch.raw is not None else 0
                    progressed = True
            if not progressed:
                break
        self._maybe_snapshot()
        committed = [(offset, done) for offset, done in self._commits if offset < high_watermark]
        self._commits = [(offset, done) for offset, done in self._commits if offset >= high_watermark]
        for _offset, done in committed:
            if not done.done():
                done.set_result(None)

    # --- snapshots ------------------------------------------------------------------------------------
    def _install(self, snapshot: OffsetAndEpoch) -> None:
        """The leader's snapshot replaced the log (the core fetched it whole): the state and the
        voter set are the snapshot's now."""
        try:
            controls, values = read_snapshot(self.log, snapshot)
        except KafkaError as exc:
            log.error("metadata quorum: cannot load the snapshot fetched from the leader: %s", exc)
            raise
        log.info("metadata quorum: loaded snapshot %s fetched from leader %s (%d records)",
                 self.log.snapshots.path(snapshot).name, self.raft.leader_id, len(values))
        if self.raft.history.dynamic or any(isinstance(m, VotersRecord) for m in controls):
            self.raft.reset_voters(VoterHistory(*snapshot_voters(controls)))
        self._load(snapshot, values)

    def _load(self, snapshot: OffsetAndEpoch, values: list[bytes]) -> None:
        for listener in self.snapshot_listeners:
            listener(snapshot.offset, values)
        self._applied, self._applied_epoch = snapshot.offset, snapshot.epoch
        self._bytes_since_snapshot = 0

    def _maybe_snapshot(self) -> None:
        """Kafka's SnapshotGenerator rule: a snapshot of the applied state once
        ``metadata.log.max.record.bytes.between.snapshots`` were committed since the last one, or
        ``metadata.log.max.snapshot.interval.ms`` after it (a timer, when records are waiting)."""
        latest = self.log.latest_snapshot()
        if (self.snapshot_source is None or self._closed or self._snapshotting is not None
                or (latest is not None and latest.offset >= self._applied)):
            return
        policy, now = self.snapshot_policy, _now_ms()
        due_ms = self._last_snapshot_ms + policy.max_interval_ms
        if self._bytes_since_snapshot >= policy.max_bytes_between or (policy.max_interval_ms and now >= due_ms):
            self._snapshot(now)
        elif policy.max_interval_ms and self._snapshot_timer is None:
            self._snapshot_timer = asyncio.get_running_loop().call_later((due_ms - now) / 1000, self._snapshot_due)

    def _snapshot_due(self) -> None:
        self._snapshot_timer = None
        self._maybe_snapshot()

    def _snapshot(self, now_ms: int) -> None:
        """The image's records are taken here, on the loop, as they stand at the applied offset; they
        are encoded and written on a thread (a large image takes a while, as in Kafka, whose
        SnapshotGenerator writes off its event queue), then listed, and the log cleaned."""
        assert self.snapshot_source is not None
        snapshot = OffsetAndEpoch(self._applied_epoch, self._applied)
        voters, version = self.raft.history.at(snapshot.offset)
        leading = [KRaftVersionRecord(version=0, k_raft_version=version), voters.to_record()] if version >= 1 else []
        records = self.snapshot_source()
        self._bytes_since_snapshot, self._last_snapshot_ms = 0, now_ms
        self._snapshotting = asyncio.ensure_future(self._write_snapshot(snapshot, records, leading, now_ms))

    async def _write_snapshot(self, snapshot: OffsetAndEpoch, records: list[Message], leading: list[Message],
                              now_ms: int) -> None:
        def write() -> None:
            values = [encode_metadata_record(record) for record in records]
            self.log.snapshots.write_file(snapshot, values, leading, now_ms)
        try:
            await asyncio.to_thread(write)
        except OSError as exc:  # the log is whole without it; the next commit tries again
            log.error("metadata quorum: could not write a snapshot in %s: %s", self.partition_dir, exc)
            return
        finally:
            self._snapshotting = None
        if self._closed:
            return
        self.log.snapshots.add(snapshot)
        policy = self.snapshot_policy
        start = self.log.snapshots.cleanable(self.log.size_bytes, policy.retention_bytes, policy.retention_ms,
                                             _now_ms())
        if start is not None:
            self.log.start_at_snapshot(start)
        self._maybe_snapshot()  # records committed while this one was written

    def _fail_commits(self) -> None:
        commits, self._commits = self._commits, []
        for _offset, done in commits:
            if not done.done():
                done.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum's leader changed"))

    def _peer(self, destination: int) -> PeerConnection | None:
        """The connection to ``destination`` at its current address (a new one if it moved)."""
        address = self.addresses.get(destination)
        if address is None or destination == self.node_id:
            return None
        peer = self._peers.get(destination)
        if peer is None or (peer.host, peer.port) != (address.host, address.port):
            if peer is not None:
                peer.close()
            peer = PeerConnection(address.host, address.port, f"raft-client-{self.node_id}",
                                  timeout_s=self.request_timeout_s)
            self._peers[destination] = peer
        return peer

    def address_of(self, node_id: int) -> VoterAddress | None:
        return self.addresses.get(node_id)

    def voter_addresses(self) -> list[VoterAddress]:
        """The current voters' addresses on this listener, by id."""
        found = (self.addresses.get(v) for v in sorted(self.raft.voters))
        return [a for a in found if a is not None]

    def addressing(self, destination: int = -1) -> Addressing:
        """The wire's extras: the destination's voter key, the leader's address on this listener,
        this node's own listeners."""
        leader = self.raft.leader_id
        named: tuple[int, str, int] | None = None
        own = self.raft.local.address(self.listener) if leader == self.node_id else None
        if own is not None:  # a leader names its own listener, as Kafka's LeaderState does
            named = (self.node_id, own.host, own.port)
        elif leader is not None and (found := self.addresses.get(leader)) is not None:
            named = (found.node_id, found.host, found.port)
        return Addressing(destination, self.raft.history.latest.directory_of(destination), named,
                          self.raft.local.endpoints)

    def _send(self, destination: int, message: core.RaftMessage) -> None:
        peer = self._peer(destination)
        if peer is None:
            return
        task = asyncio.ensure_future(self._call(destination, peer, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, destination: int, peer: PeerConnection, message: core.RaftMessage) -> None:
        version = REQUEST_VERSIONS[type(message)]
        request: Message = to_wire(message, self.cluster_id, addressing=self.addressing(destination))
        try:
            response = await peer.call(request, version)
        except PeerError as exc:
            log.debug("metadata quorum: %s", exc)
            gone = (destination, self.raft.epoch)
            # A voter reports a leader once per epoch: if its pre-vote fails (another voter still
            # hears from it), the fetch timeout decides, as without this. An observer reports it each
            # time: a voter that has not noticed yet may send it back to the dead leader.
            observer = self.node_id not in self.raft.voters
            if (not exc.timed_out and destination == self.raft.leader_id and (observer or gone != self._reported_gone)
                    and await _refuses(peer)):
                self._leader_gone(destination, gone)
            elif not exc.timed_out and not self._closed:
                self._run(self.raft.connection_failed(destination, _now_ms()))
            return  # else unanswered: the core retries after its request timeout
        if self._closed:
            return
        for node_id, host, port in node_endpoints(response):  # before the core follows the leader named
            self.addresses.learned(node_id, host, port)
        assert isinstance(message, core.VoteRequest | core.BeginQuorumEpochRequest | core.EndQuorumEpochRequest
                          | core.FetchRequest | core.FetchSnapshotRequest | core.UpdateVoterRequest)
        answer = from_wire(response, message.correlation_id)
        if getattr(answer, "error_code", None) is ErrorCode.INCONSISTENT_CLUSTER_ID:
            self._refused_cluster_id(destination)
        if isinstance(answer, core.UpdateVoterResponse):
            log.log(logging.INFO if answer.error_code else logging.DEBUG,
                    "metadata quorum: UpdateRaftVoter to leader %d: %s", destination, answer.error_code.name)
        self._run(self.raft.receive(destination, answer, _now_ms()))

    def _log_failed(self, failed: Log, exc: OSError) -> None:
        reason = describe(exc)
        log.error("the metadata log %s is offline: %s", failed.dir, reason)
        for listener in self.failure_listeners:
            listener(f"the metadata log {failed.dir} is offline: {reason}")

    def _refused_cluster_id(self, node: int) -> None:
        """Kafka logs this on every answer; once a minute says the same without flooding the log."""
        now = time.monotonic()
        if now - self._cluster_id_refused_at >= CLUSTER_ID_LOG_EVERY_S:
            self._cluster_id_refused_at = now
            log.error("metadata quorum: node %d answered INCONSISTENT_CLUSTER_ID: this node's cluster id %s is not "
                      "the quorum's (were its log dirs formatted for another cluster?)", node, self.cluster_id)

    def _leader_gone(self, leader: int, gone: tuple[int, int]) -> None:
        self._reported_gone = gone
        log.info("metadata quorum: leader %d's connection ended and its port refuses connections: "
                 "electing a new leader now", leader)
        self._run(self.raft.leader_gone(leader, _now_ms()))

    def _check_leader(self, asker: int) -> None:
        """Another voter asks for a pre-vote while this one follows a leader: that voter has seen the
        leader's process gone, or lost touch with it. This one looks too (its port refusing is the
        evidence), rather than refusing until its own fetch times out."""
        leader, epoch = self.raft.leader_id, self.raft.epoch
        if leader is None or leader == asker or self.raft.role != "Follower" or (leader, epoch) == self._reported_gone:
            return
        peer = self._peer(leader)
        if peer is None:
            return

        async def look() -> None:
            if await _refuses(peer) and not self._closed and (self.raft.leader_id, self.raft.epoch) == (leader, epoch):
                self._leader_gone(leader, (leader, epoch))
        task = asyncio.ensure_future(look())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- state ------------------------------------------------------------------------------------
    @property
    def leads(self) -> bool:
        return self.raft.role == "Leader"

    def describe(self) -> tuple[int, int, int]:
        """(leader id or -1, epoch, high watermark) as this voter knows them."""
        return self.raft.leader_or_none(), self.raft.epoch, self.raft.high_watermark

    async def close(self) -> None:
        """Step down if leading (EndQuorumEpoch, so the others elect at once), then close."""
        if not self._closed and self.raft.leader_id == self.node_id and self.raft.role == "Leader":
            self._run(self.raft.resign(_now_ms()))
            if self._tasks:  # the EndQuorumEpoch requests on their way, briefly
                await asyncio.wait(set(self._tasks), timeout=0.5)
        self._closed = True
        for timer in (self._timer, self._snapshot_timer):
            if timer is not None:
                timer.cancel()
        for answer in self._answers.values():
            answer.cancel()
        self._fail_commits()
        for task in list(self._tasks):
            task.cancel()
        if self._snapshotting is not None:  # its thread finishes the file; nothing lists it
            self._snapshotting.cancel()
        for peer in self._peers.values():
            peer.close()
        self.log.close()
