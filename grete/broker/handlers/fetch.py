"""Fetch (1): file slices of the log, long-polled on parked futures.

The records of each partition are the storage layer's file slices, written to the socket with
sendfile (large) or pread (small) by the connection; nothing here touches record bytes. A fetch
that finds fewer than ``min_bytes`` parks one future on all its partitions and is woken by the first
that has something for it (or by its ``max_wait_ms`` timer). Fetch sessions (KIP-227) are in fetch_sessions.py: the plan says
which partitions a request reads, and the session filters the answer.

Idle consumers repeat the same Fetch, byte for byte apart from the correlation id, and get the same
empty answer. A response with nothing to read in any partition is an :class:`EmptyFetchResponse`
carrying a :class:`Snapshot` of the state it was built from, taken in the same loop step as the read;
the connection keeps the encoded answer and, for the next identical request, asks
:meth:`Snapshot.unchanged` instead of decoding, reading and encoding again (see connection.py); for
the same request in another order of partitions, :meth:`Snapshot.reordered` (fetch_repeats.py).

Fetch v0-3, which a broker of a ZooKeeper cluster serves as Kafka 3.9's does (Kafka 4 removed them,
KIP-896; the registry refuses them elsewhere), take records in the message formats before v2: the
answer's slices are read and down-converted (v0-1: magic 0, v2-3: magic 1), as Kafka 3.9 converts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from grete.broker.quorum.rpc import answer, is_metadata_fetch
from grete.broker.replica import fetch_sessions as sessions
from grete.broker.replica import fetch_watch as watch
from grete.broker.replica.fetch_watch import expiry, park_on
from grete.broker.replica.partition import Partition
from grete.broker.replica.partition_log_view import high_watermark_and_start_of
from grete.broker.replica.writers import Slice, read_slice
from grete.broker.requests.context import Later, RequestContext
from grete.broker.requests.leader_hints import current_leader
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, FetchRequest, FetchResponse
from grete.protocol.records.legacy import downconvert

if TYPE_CHECKING:
    from grete.broker.quorum.driver import RaftDriver

READ_COMMITTED = 1
FIRST_V2_VERSION = 4  # Fetch versions before it take the message formats before v2
LEADER_HINTS_VERSION = 16  # KIP-951: CurrentLeader and NodeEndpoints in the answer
PartitionData = FetchResponse.PartitionData


@api(ApiKey.FETCH, 0, 18, advertised_min=4)
def handle(ctx: RequestContext[DataPlane], request: FetchRequest) -> FetchResponse | Later | Coroutine[Any, Any, FetchResponse]:
    broker = ctx.broker
    if broker.quorum is not None and is_metadata_fetch(request):
        return _metadata_fetch(ctx, broker.quorum, request)  # a voter or observer of the quorum
    try:
        fetch_plan = sessions.plan(broker.fetch_sessions, request, ctx.version, _replica_id(ctx, request) >= 0,
                                   broker.topic_name_for, broker.now_ms())
    except sessions.SessionError as exc:
        return FetchResponse(error_code=exc.code, session_id=0, responses=[])
    response, total, parked = _read(ctx, request, fetch_plan)
    if request.max_wait_ms <= 0 or total >= max(request.min_bytes, 1) or not parked:
        return _answer(ctx, fetch_plan, response)
    return _long_poll(ctx, request, fetch_plan, parked, response=response)


def resume(ctx: RequestContext[DataPlane], request: FetchRequest, deadline: float) -> FetchResponse | Later:
    """Go on with a long poll that a wake-up interrupted (the connection's memo path, sessionless
    fetches only): answer now if ``min_bytes`` are there or ``deadline`` (loop time) has passed, else
    wait on until the deadline."""
    fetch_plan = sessions.sessionless(request, ctx.version, ctx.broker.topic_name_for)
    response, total, parked = _read(ctx, request, fetch_plan)
    if total >= max(request.min_bytes, 1) or not parked or asyncio.get_running_loop().time() >= deadline:
        return _answer(ctx, fetch_plan, response)
    return _long_poll(ctx, request, fetch_plan, parked, deadline)


async def _metadata_fetch(ctx: RequestContext[DataPlane], driver: RaftDriver, request: FetchRequest) -> FetchResponse:
    response = await answer(ctx, driver, request)
    assert isinstance(response, FetchResponse)
    return response


def _replica_id(ctx: RequestContext[DataPlane], request: FetchRequest) -> int:
    return request.replica_id if ctx.version < 15 else request.replica_state.replica_id


def _read(ctx: RequestContext[DataPlane], request: FetchRequest, fetch_plan: sessions.FetchPlan,
          update_fetch_state: bool = True) -> tuple[FetchResponse, int, list[Partition]]:
    """One pass over the plan's partitions: (response, bytes found, partitions to wait on).
    ``update_fetch_state``: a follower's fetch moves its fetch state (caught-up time, ISR, high
    watermark) on its first read only, not on the read that completes it after a wait (Kafka's
    ``updateFetchState = !readFromPurgatory``)."""
    remaining = request.max_bytes
    total = 0
    waitable: list[Partition] = []
    topics = []
    replica_id = _replica_id(ctx, request)
    # No memo for a follower's fetch: each one moves its fetch state (caught-up time, ISR, HW); nor
    # for one in a session, whose every answer moves the session.
    nothing_to_read = replica_id < 0 and fetch_plan.session is None and not fetch_plan.create
    # Kafka's isFromFollower branch: a replica's fetch needs CLUSTER_ACTION on the cluster, asked once
    # per request (else every partition answers TOPIC_AUTHORIZATION_FAILED).
    replica_allowed = replica_id < 0 or ctx.broker.authorizer is None or cluster_allowed(ctx, Op.CLUSTER_ACTION)
    quiet = _quiet_check(ctx, request, fetch_plan, replica_id, replica_allowed, update_fetch_state)
    all_quiet = quiet is not None and replica_id >= 0
    for group_index, (name, topic_id, wanted_partitions) in enumerate(fetch_plan.groups):
        partitions: list[PartitionData | None] = []
        cached = fetch_plan.cached[group_index] if quiet is not None and fetch_plan.cached is not None else None
        for wanted_index, wanted in enumerate(wanted_partitions):
            if quiet is not None and cached is not None:
                idle = quiet(name, topic_id, wanted, cached[wanted_index])
                if idle is not None:  # nothing the fetcher does not know: no read, no answer
                    waitable.append(idle)
                    partitions.append(None)
                    continue
            all_quiet = False
            if replica_id >= 0:
                data, partition = _read_for_follower(ctx, request, replica_id, replica_allowed, name, topic_id,
                                                     wanted, remaining, total == 0, update_fetch_state)
            else:
                data, partition = _read_partition(ctx, request, name, topic_id, wanted, remaining, total == 0)
            size = _records_size(data.records)
            total += size
            remaining = max(remaining - size, 0)
            if partition is None or wanted.fetch_offset < _upper(request, partition):
                nothing_to_read = False
            if partition is not None:
                waitable.append(partition)
            partitions.append(data)
        topics.append(FetchResponse.FetchableTopicResponse(topic=name or "", topic_id=topic_id,
                                                           partitions=partitions))  # type: ignore[arg-type]
    if nothing_to_read and waitable:
        empty = EmptyFetchResponse(error_code=0, session_id=0, responses=topics)
        empty.snapshot = Snapshot(ctx.broker, waitable, ctx.version, empty,
                                  committed=request.isolation_level == READ_COMMITTED)
        return empty, total, waitable
    if all_quiet and waitable:
        return QuietFetchResponse(error_code=0, session_id=0, responses=topics), total, waitable
    return FetchResponse(error_code=0, session_id=0, responses=topics), total, waitable


QuietCheck = Callable[[str | None, uuid.UUID, FetchRequest.FetchPartition, sessions.CachedPartition],
                      Partition | None]


def _quiet_check(ctx: RequestContext[DataPlane], request: FetchRequest, fetch_plan: sessions.FetchPlan,
                 replica_id: int, replica_allowed: bool, update_fetch_state: bool = True) -> QuietCheck | None:
    """For an incremental fetch: a check that finds a session partition with nothing new for its
    fetcher without reading it (the cost of an idle partition in a session is this check). Only on
    a leader, for a fetcher allowed to read (a replica's right asked once per request, a consumer's once
    per topic) that its rack cannot send to a follower; None: read every partition."""
    if fetch_plan.cached is None or _rack_may_redirect(ctx, request):
        return None
    if replica_id >= 0:
        return _quiet_follower(ctx, replica_id, update_fetch_state) if replica_allowed else None
    quiet = _quiet_consumer(ctx, request)
    if ctx.broker.authorizer is None:
        return quiet
    readable: dict[str, bool] = {}

    def quiet_if_readable(name: str | None, topic_id: uuid.UUID, wanted: FetchRequest.FetchPartition,
                          cp: sessions.CachedPartition) -> Partition | None:
        if name is None:
            return None
        if name not in readable:
            readable[name] = allowed(ctx, Op.READ, Res.TOPIC, name)
        return quiet(name, topic_id, wanted, cp) if readable[name] else None  # else read: the refusal

    return quiet_if_readable


def _quiet_consumer(ctx: RequestContext[DataPlane], request: FetchRequest) -> QuietCheck:
    hosted = ctx.broker.partitions
    by_id = ctx.version >= sessions.TOPIC_IDS_VERSION
    committed = request.isolation_level == READ_COMMITTED

    def quiet(name: str | None, topic_id: uuid.UUID, wanted: FetchRequest.FetchPartition,
              cp: sessions.CachedPartition) -> Partition | None:
        partition = _served(hosted, by_id, name, topic_id, wanted)
        if partition is None:
            return None
        high_watermark, stable, start, end = partition.offsets()
        offset = wanted.fetch_offset
        if (cp.high_watermark != high_watermark or cp.log_start_offset != start or offset < start or offset > end
                or offset < (stable if committed else high_watermark)):
            return None
        return partition

    return quiet


def _quiet_follower(ctx: RequestContext[DataPlane], replica_id: int, update_fetch_state: bool = True) -> QuietCheck:
    """A follower's partition is quiet if it asks for the log end, the epoch it last fetched has
    not diverged, and the high watermark and log start are what it was last told (also after its
    fetch state moved, which must happen on every fetch: its caught-up time keeps it in the ISR)."""
    hosted = ctx.broker.partitions
    by_id = ctx.version >= sessions.TOPIC_IDS_VERSION
    now_ms = ctx.broker.now_ms()

    def quiet(name: str | None, topic_id: uuid.UUID, wanted: FetchRequest.FetchPartition,
              cp: sessions.CachedPartition) -> Partition | None:
        partition = _served(hosted, by_id, name, topic_id, wanted)
        if partition is None or replica_id not in partition.replicas:
            return None
        high_watermark, _, start, end = partition.offsets()
        offset = wanted.fetch_offset
        if offset != end or cp.high_watermark != high_watermark or cp.log_start_offset != start:
            return None
        if wanted.last_fetched_epoch >= 0:
            epoch, epoch_end = partition.end_offset_for_epoch(wanted.last_fetched_epoch)
            if epoch < wanted.last_fetched_epoch or epoch_end < offset:
                return None  # the read answers it (a diverging epoch, or out of range)
        if not update_fetch_state:
            return partition
        partition.update_follower(replica_id, offset, now_ms)
        return partition if partition.high_watermark == high_watermark else None

    return quiet


def _served(hosted: dict[tuple[str, int], Partition], by_id: bool, name: str | None, topic_id: uuid.UUID,
            wanted: FetchRequest.FetchPartition) -> Partition | None:
    """The partition a session asks for, if this broker leads it and the request's leader epoch and
    topic id are right; None: the read answers (with the error)."""
    partition = hosted.get((name, wanted.partition)) if name is not None else None
    if partition is None or not partition.is_leader or not partition.online:
        return None
    epoch = wanted.current_leader_epoch
    if (epoch != -1 and epoch != partition.leader_epoch) or (by_id and partition.topic_id != topic_id):
        return None
    return partition


def _answer(ctx: RequestContext[DataPlane], fetch_plan: sessions.FetchPlan, response: FetchResponse) -> FetchResponse:
    """The answer as sent: the session's say on which partitions go in (and a new session's id),
    leader hints from v16, Kafka's counts."""
    if ctx.version >= LEADER_HINTS_VERSION:
        _leader_hints(ctx, fetch_plan, response)
    if fetch_plan.session is not None or fetch_plan.create:
        response.session_id, response.responses = sessions.finish(
            ctx.broker.fetch_sessions, fetch_plan, response.responses, _records_size, ctx.broker.now_ms())
    if ctx.version < FIRST_V2_VERSION:
        _down_convert(ctx, response, 0 if ctx.version <= 1 else 1)
    return _counted(ctx, response)


def _down_convert(ctx: RequestContext[DataPlane], response: FetchResponse, magic: int) -> None:
    """Each partition's records as a message set of ``magic``, control batches left out; a zstd
    batch cannot be (UNSUPPORTED_COMPRESSION_TYPE for its partition, as Kafka 3.9 answers), nor a
    topic's with ``message.downconversion.enable=false`` (UNSUPPORTED_VERSION, Kafka 3.9's answer to
    a consumer's fetch; a follower's never needs converting)."""
    for topic in response.responses:
        meta = ctx.broker.metadata.topic(topic.topic)
        refused = meta is not None and meta.configs.get("message.downconversion.enable", "true").lower() == "false"
        for data in topic.partitions:
            if refused and data.error_code == ErrorCode.NONE:
                data.error_code, data.records = ErrorCode.UNSUPPORTED_VERSION, None
                data.high_watermark = data.last_stable_offset = data.log_start_offset = -1
                continue
            records = data.records
            if records is not None and _records_size(records):
                raw = records if isinstance(records, bytes | bytearray | memoryview) else \
                    b"".join(read_slice(cast(Slice, chunk)) for chunk in records.chunks)
                try:
                    data.records = downconvert(raw, magic)
                except KafkaError as exc:  # as Kafka 3.9 answers it: no offsets, null records
                    data.error_code, data.records = exc.code, None
                    data.high_watermark = data.last_stable_offset = data.log_start_offset = -1


def _leader_hints(ctx: RequestContext[DataPlane], fetch_plan: sessions.FetchPlan, response: FetchResponse) -> None:
    """KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader
    this broker knows, and the answer carries that leader's endpoint."""
    endpoints: dict[int, FetchResponse.NodeEndpoint] = {}
    for (name, _, _), topic in zip(fetch_plan.groups, response.responses, strict=True):
        for data in topic.partitions:
            if data is None or data.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                       ErrorCode.FENCED_LEADER_EPOCH):
                continue
            leader = current_leader(ctx, name or "", data.partition_index)
            data.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=leader.leader_id,
                                                                 leader_epoch=leader.leader_epoch)
            if leader.endpoint is not None and leader.leader_id not in endpoints:
                host, port, rack = leader.endpoint
                endpoints[leader.leader_id] = FetchResponse.NodeEndpoint(node_id=leader.leader_id, host=host,
                                                                         port=port, rack=rack)
    response.node_endpoints = list(endpoints.values())


def _upper(request: FetchRequest, partition: Partition) -> int:
    if request.replica_id >= 0 or request.replica_state.replica_id >= 0:
        return partition.log_end_offset  # a follower reads the whole log
    return partition.last_stable_offset if request.isolation_level == READ_COMMITTED else partition.high_watermark


class Snapshot(watch.Snapshot):
    """The watch of an empty answer (grete/broker/replica/fetch_watch.py), with the Fetch handler's
    rules for a repeat that a change woke: the connection calls this hook, so it never imports the
    handler."""

    __slots__ = ()

    def resume(self, ctx: RequestContext[DataPlane], request: FetchRequest, deadline: float) -> FetchResponse | Later:
        return resume(ctx, request, deadline)


class QuietFetchResponse(FetchResponse):
    """A follower's incremental answer in which every partition was found quiet: nothing new for
    it in any (none was read, none is in the answer)."""

    __slots__ = ()


class EmptyFetchResponse(FetchResponse):
    """A FetchResponse with no records and no errors, plus the :class:`Snapshot` it was read from."""

    __slots__ = ("snapshot",)
    snapshot: Snapshot


def _read_partition(ctx: RequestContext[DataPlane], request: FetchRequest, name: str | None, topic_id: uuid.UUID,
                    wanted: FetchRequest.FetchPartition, remaining: int,
                    first: bool) -> tuple[PartitionData, Partition | None]:
    try:
        topic = _known(ctx, name)
        if ctx.broker.authorizer is not None and not allowed(ctx, Op.READ, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        # KIP-392: a consumer fetch carrying client metadata (v11+) may read from a follower.
        partition = ctx.broker.replicas.readable(topic, wanted.partition, from_follower=ctx.version >= 11)
        _check_topic_id(ctx, partition, topic_id)
        partition.check_leader_epoch(wanted.current_leader_epoch)
        preferred = _preferred_read_replica(ctx, request, partition, wanted.fetch_offset)
        if preferred >= 0:
            return PartitionData(partition_index=wanted.partition, error_code=0,
                                 high_watermark=partition.high_watermark,
                                 last_stable_offset=partition.last_stable_offset,
                                 log_start_offset=partition.log_start_offset,
                                 preferred_read_replica=preferred, records=b""), partition
        committed = request.isolation_level == READ_COMMITTED
        upper = partition.last_stable_offset if committed else partition.high_watermark
        offset = wanted.fetch_offset
        if offset < partition.log_start_offset or offset > partition.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        records: Any = b""
        if offset < upper:
            # KIP-74: the first partition with data returns at least one whole batch.
            result = partition.read(offset, min(wanted.partition_max_bytes, remaining),
                                        upper_bound=upper, min_one=first)
            if result.size:
                records = result
        # Nothing below the bound: no transaction to name (an idle read_committed fetch's case).
        aborted = (partition.aborted_transactions(offset, upper) if offset < upper else []) if committed else None
    except KafkaError as exc:
        return PartitionData(partition_index=wanted.partition, error_code=exc.code, high_watermark=-1,
                             last_stable_offset=-1, log_start_offset=-1, records=b""), None
    data = PartitionData(
        partition_index=wanted.partition, error_code=0, high_watermark=partition.high_watermark,
        last_stable_offset=partition.last_stable_offset, log_start_offset=partition.log_start_offset,
        aborted_transactions=None if aborted is None else [
            FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first_offset)
            for pid, first_offset in aborted],
        preferred_read_replica=-1, records=records)
    return data, partition


def _known(ctx: RequestContext[DataPlane], name: str | None) -> str:
    """The topic's name; None: a topic id (v13+) this broker does not know."""
    if name is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
    return name


def _check_topic_id(ctx: RequestContext[DataPlane], partition: Partition, topic_id: uuid.UUID) -> None:
    """v13+: the replica here must be of the topic the id names (not a deleted one of the same name)."""
    if ctx.version >= sessions.TOPIC_IDS_VERSION and partition.topic_id != topic_id:
        raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID)


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _rack_may_redirect(ctx: RequestContext[DataPlane], request: FetchRequest) -> bool:
    """Whether a consumer's rack may send it to a follower (KIP-392): Fetch v11+, a rack named, the
    rack-aware selector configured. A rack alone, with Kafka's default selector, changes nothing."""
    return (bool(request.rack_id) and ctx.version >= 11
            and ctx.broker.config.get_str("replica.selector.class") == RACK_AWARE_SELECTOR)


def _preferred_read_replica(ctx: RequestContext[DataPlane], request: FetchRequest, partition: Partition,
                            fetch_offset: int) -> int:
    """Kafka's RackAwareReplicaSelector, asked by a leader for a consumer that named its rack
    (``client.rack``, Fetch v11+): the leader itself if it is in that rack (or no replica is),
    else the in-sync follower there that holds the fetch offset and has the most of the log.
    -1: read here."""
    if not _rack_may_redirect(ctx, request) or not partition.is_leader or not partition.has_followers:
        return -1
    racks = {b.id: b.rack for b in ctx.broker.live_brokers()}
    if racks.get(partition.leader_id) == request.rack_id:
        return -1
    same_rack = [r for r in partition.read_replicas(fetch_offset) if racks.get(r) == request.rack_id]
    if not same_rack:
        return -1
    return max(same_rack, key=lambda r: (partition.follower_log_end(r), -r))


def _read_for_follower(ctx: RequestContext[DataPlane], request: FetchRequest, replica_id: int, replica_allowed: bool,
                       name: str | None, topic_id: uuid.UUID, wanted: FetchRequest.FetchPartition, remaining: int,
                       first: bool, update_fetch_state: bool = True) -> tuple[PartitionData, Partition | None]:
    """A follower's fetch (Kafka's Partition.fetchRecords for a replica): the leader's whole log up
    to its end, or the epoch where the follower's log diverged (KIP-320); then the follower's
    fetch state moves (ISR, high watermark)."""
    try:
        topic = _known(ctx, name)
        if not replica_allowed:
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        partition = ctx.broker.partition(topic, wanted.partition)
        _check_topic_id(ctx, partition, topic_id)
        partition.check_leader_epoch(wanted.current_leader_epoch)
        if replica_id not in partition.replicas:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH if wanted.current_leader_epoch >= 0
                             else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of {topic}-{wanted.partition}")
        offset = wanted.fetch_offset
        if wanted.last_fetched_epoch >= 0:
            epoch, end = partition.end_offset_for_epoch(wanted.last_fetched_epoch)
            if epoch < 0 or end < 0:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
            if epoch < wanted.last_fetched_epoch or end < offset:
                return PartitionData(
                    partition_index=wanted.partition, error_code=0, high_watermark=partition.high_watermark,
                    last_stable_offset=partition.last_stable_offset, log_start_offset=partition.log_start_offset,
                    diverging_epoch=FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end),
                    records=b""), partition
        if offset < partition.log_start_offset or offset > partition.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        records: Any = b""
        quota = ctx.broker.replicas.leader_quota
        throttled = quota is not None and replica_id not in partition.isr and quota.throttled(topic, wanted.partition)
        # A throttled replica that has not caught up gets nothing while the leader's quota is
        # exceeded (Kafka's shouldLeaderThrottle); what it is sent counts against the quota.
        if offset < partition.log_end_offset and not (throttled and quota is not None and quota.exceeded()):
            result = partition.read(offset, min(wanted.partition_max_bytes, remaining),
                                    upper_bound=partition.log_end_offset, min_one=first)
            if result.size:
                records = result
                if throttled and quota is not None:
                    quota.record(result.size)
        if update_fetch_state:
            partition.update_follower(replica_id, offset, ctx.broker.now_ms())
    except KafkaError as exc:
        return PartitionData(partition_index=wanted.partition, error_code=exc.code, high_watermark=-1,
                             last_stable_offset=-1, log_start_offset=-1, records=b""), None
    return PartitionData(partition_index=wanted.partition, error_code=0, high_watermark=partition.high_watermark,
                         last_stable_offset=partition.last_stable_offset,
                         log_start_offset=partition.log_start_offset, preferred_read_replica=-1,
                         records=records), partition


def _records_size(records: Any) -> int:
    if records is None:
        return 0
    size = getattr(records, "size", None)
    return int(size) if size is not None else len(records)


def _long_poll(ctx: RequestContext[DataPlane], request: FetchRequest, fetch_plan: sessions.FetchPlan,
               parked: list[Partition], deadline: float | None = None,
               response: FetchResponse | None = None) -> Later:
    """Wait for ``min_bytes`` or the deadline (Kafka's DelayedFetch). ``response``: the empty answer
    read when the fetch arrived; at the deadline it is the answer again if nothing it depends on
    moved (its snapshot), without reading every partition a second time."""
    return _LongPoll(ctx, request, fetch_plan, parked, expiry(request.max_wait_ms) if deadline is None else deadline,
                     response).answer


class _LongPoll:
    """A parked fetch: one future on its partitions (a wake reads them again, without moving a
    follower's fetch state: Kafka's ``updateFetchState = !readFromPurgatory``), and a timer at its
    deadline that answers it directly; the answer is a :class:`Later`, no task."""

    __slots__ = ("ctx", "request", "plan", "deadline", "response", "answer", "woken", "timer", "replica",
                 "parked", "quiet")

    def __init__(self, ctx: RequestContext[DataPlane], request: FetchRequest, fetch_plan: sessions.FetchPlan,
                 parked: list[Partition], deadline: float, response: FetchResponse | None) -> None:
        self.ctx = ctx
        self.request = request
        self.plan = fetch_plan
        self.deadline = deadline
        self.response = response
        self.answer = Later()
        self.replica = _replica_id(ctx, request) >= 0
        self.parked = parked
        # A follower's fetch with every partition quiet: what it was told of each (high watermark, log
        # start); None once a wake came (it is read again at the deadline then).
        self.quiet = list(map(high_watermark_and_start_of, parked)) if isinstance(response, QuietFetchResponse) \
            else None
        loop = asyncio.get_running_loop()
        self.woken = self._park(parked)
        self.timer = loop.call_at(deadline, self._expired)

    def _park(self, parked: list[Partition]) -> asyncio.Future[None]:
        woken = park_on(parked, replica=self.replica)
        woken.add_done_callback(self._woken)
        return woken

    def _woken(self, woken: asyncio.Future[None]) -> None:
        if woken is not self.woken or woken.cancelled() or self.answer.settled:
            return  # answered already (the timer, in the same loop step)
        self.quiet = None
        try:
            response, total, parked = _read(self.ctx, self.request, self.plan, update_fetch_state=False)
            if total >= self.request.min_bytes or not parked:
                self.timer.cancel()
                self.answer.settle(_answer(self.ctx, self.plan, response))
                return
        except Exception as exc:
            self.timer.cancel()
            self.answer.settle(None, exc)
            return
        self.response = response
        self.parked = parked
        self.woken = self._park(parked)  # until the timer, however soon it fires

    def _expired(self) -> None:
        self.woken.cancel()  # left in the partitions' lists, swept later
        try:
            response = self.response
            # No wake, no new high watermark or log start: every partition of a quiet follower's
            # fetch is still quiet (what else moves one wakes it), and the answer is the same.
            quiet = self.quiet is not None and list(map(high_watermark_and_start_of, self.parked)) == self.quiet
            if response is None or not (quiet or (isinstance(response, EmptyFetchResponse)
                                                  and response.snapshot.unchanged())):
                response = _read(self.ctx, self.request, self.plan, update_fetch_state=False)[0]
            answer = _answer(self.ctx, self.plan, response)
        except Exception as exc:
            self.answer.settle(None, exc)
            return
        self.answer.settle(answer)


def _counted(ctx: RequestContext[DataPlane], response: FetchResponse) -> FetchResponse:
    """Kafka's per-topic fetch counts and bytes out, and each partition's error, for the answer sent."""
    metrics = ctx.broker.metrics
    errors = metrics.api(1).errors
    for topic in response.responses:
        for data in topic.partitions:
            metrics.fetched(topic.topic, _records_size(data.records), data.error_code != 0)
            errors[data.error_code] = errors.get(data.error_code, 0) + 1
    return response
