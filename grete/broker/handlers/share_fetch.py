"""ShareFetch (78): a share-group member acquires records under acquisition locks and, piggy-backed,
acknowledges earlier ones; share sessions carry its partitions from request to request (KIP-932).

A fetch that acquires nothing parks until new records, a release or a lock expiry, or MaxWaitMs.
Whole batches are acquired (ShareAcquireMode batch_optimized) unless record_limit (v2) asks for
exactly MaxRecords at most; they are answered in AcquiredRecords ranges of at least BatchSize
records (record_limit: one range). MaxBytes or MaxRecords 0 acquires nothing and answers at once
(acknowledgements only), as Kafka 4.3.1 does. The records sent are the log's batches covering the
acquired offsets; the client delivers only the offsets named in AcquiredRecords.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from grete.broker.groups.share_groups import Grant
from grete.broker.groups.share_requests import acks_of, apply_acks, leader_of, topic_readable
from grete.broker.groups.share_sessions import FINAL_EPOCH, INITIAL_EPOCH, PartitionKey, ShareSession
from grete.broker.replica.partition import Partition
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ShareFetchRequest, ShareFetchResponse

Response = ShareFetchResponse
RECORD_LIMIT = 1


@api(ApiKey.SHARE_FETCH, 1, 2)
async def handle(ctx: RequestContext[Groups], request: ShareFetchRequest) -> ShareFetchResponse:
    group_id, member_id = request.group_id or "", request.member_id
    if not allowed(ctx, Op.READ, Res.GROUP, group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id or not member_id:
        return Response(error_code=ErrorCode.INVALID_REQUEST, error_message="GroupId and MemberId must be set.")
    epoch = request.share_session_epoch
    acks = acks_of((t.topic_id, t.partitions) for t in request.topics)
    if epoch == INITIAL_EPOCH and acks:
        return Response(error_code=ErrorCode.INVALID_REQUEST,
                        error_message="Acknowledge data present on initial epoch.")
    shares = ctx.broker.share_groups
    try:
        session = shares.session_for(group_id, member_id, epoch, fetch=True, connection=id(ctx.session))
    except KafkaError as exc:
        return Response(error_code=exc.code, error_message=exc.message)
    ack_results = await apply_acks(ctx, group_id, member_id, acks)
    rows: dict[PartitionKey, Response.PartitionData] = {
        key: _row(ctx, key, ack_error=code) for key, code in ack_results.items()}
    if epoch == FINAL_EPOCH:
        await shares.session_closed(session)
        return _response(ctx, group_id, rows)
    _update_session(session, request)
    session.bump()
    # a renew-only request (KIP-1222, v2) acquires nothing, nor one with no room for records
    if not request.is_renew_ack and request.max_bytes > 0 and request.max_records > 0:
        await _acquire(ctx, request, session, rows)
    return _response(ctx, group_id, rows)


def _update_session(session: ShareSession, request: ShareFetchRequest) -> None:
    for topic in request.topics:
        session.partitions.update((topic.topic_id, p.partition_index) for p in topic.partitions)
    for forgotten in request.forgotten_topics_data:
        session.partitions.difference_update((forgotten.topic_id, i) for i in forgotten.partitions)


async def _acquire(ctx: RequestContext[Groups], request: ShareFetchRequest, session: ShareSession,
                   rows: dict[PartitionKey, Response.PartitionData]) -> None:
    shares = ctx.broker.share_groups
    deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
    max_records = request.max_records
    while True:
        grants: list[tuple[PartitionKey, Grant]] = []
        budget, byte_budget = max_records, request.max_bytes
        for key in sorted(session.partitions):
            if not topic_readable(ctx, key):
                rows[key] = _row(ctx, key, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED, ack_error=_ack_error(rows, key))
                continue
            if budget <= 0:
                break
            try:
                await shares.prepare(session.group_id, key)
                grant = shares.acquire(session.group_id, session.member_id, key, budget, byte_budget,
                                       record_limit=request.share_acquire_mode == RECORD_LIMIT,
                                       batch_size=request.batch_size)
            except KafkaError as exc:
                rows[key] = _row(ctx, key, error=exc.code, ack_error=_ack_error(rows, key))
                continue
            if grant.acquired:
                grants.append((key, grant))
                budget -= sum(a.last - a.first + 1 for a in grant.acquired)
        if grants:
            for key, grant in grants:
                rows[key] = _records_row(ctx, key, grant, byte_budget, _ack_error(rows, key))
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await _park(ctx, session, remaining)


async def _park(ctx: RequestContext[Groups], session: ShareSession, timeout: float) -> None:
    """Until a session partition gets records, or records are released or expire, or ``timeout``."""
    shares = ctx.broker.share_groups
    partitions = []
    for key in session.partitions:
        try:
            partitions.append(shares.resolve(key))
        except KafkaError:
            continue
    futures = [p.waiter() for p in partitions]
    shared = shares.waiter()
    try:
        await asyncio.wait([*futures, shared], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for p, f in zip(partitions, futures, strict=True):
            p.discard_waiter(f)
        shares.discard_waiter(shared)


def _records_row(ctx: RequestContext[Groups], key: PartitionKey, grant: Grant, max_bytes: int,
                 ack_error: int) -> Response.PartitionData:
    partition = grant.partition
    first = min(a.first for a in grant.acquired)
    last = max(a.last for a in grant.acquired)
    # The acquired batches are sent whole even past max_bytes: they are acquired now. The log serves
    # nothing when the bound falls inside a batch, so the bound is the end of the batch holding
    # ``last`` (a redelivery or a record_limit acquisition may stop inside one).
    result = partition.read(first, max(max_bytes, 1), upper_bound=_batch_end(partition, last), min_one=True)
    return Response.PartitionData(
        partition_index=key[1], error_code=0, acknowledge_error_code=ack_error,
        current_leader=Response.LeaderIdAndEpoch(leader_id=ctx.broker.node_id, leader_epoch=partition.leader_epoch),
        records=result if result.size else b"",
        acquired_records=[Response.AcquiredRecords(first_offset=a.first, last_offset=a.last,
                                                   delivery_count=a.delivery_count) for a in grant.acquired])


def _batch_end(partition: Partition, offset: int) -> int:
    for batch in partition.batches(offset, offset + 1):
        if batch.base_offset <= offset <= batch.last_offset:
            return min(batch.next_offset, partition.high_watermark)
        break
    return offset + 1


def _ack_error(rows: dict[PartitionKey, Response.PartitionData], key: PartitionKey) -> int:
    row = rows.get(key)
    return row.acknowledge_error_code if row is not None else 0


def _row(ctx: RequestContext[Groups], key: PartitionKey, *, error: int = 0, ack_error: int = 0) -> Response.PartitionData:
    leader, leader_epoch = leader_of(ctx, key)
    return Response.PartitionData(partition_index=key[1], error_code=error, acknowledge_error_code=ack_error,
                                  current_leader=Response.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch),
                                  records=b"")


def _response(ctx: RequestContext[Groups], group_id: str, rows: dict[PartitionKey, Response.PartitionData]) -> Response:
    by_topic: dict[uuid.UUID, list[Response.PartitionData]] = {}
    for (topic_id, _), row in sorted(rows.items(), key=lambda kv: kv[0]):
        by_topic.setdefault(topic_id, []).append(row)
    return Response(acquisition_lock_timeout_ms=ctx.broker.share_groups.lock_ms(group_id), responses=[
        Response.ShareFetchableTopicResponse(topic_id=topic_id, partitions=parts)
        for topic_id, parts in by_topic.items()])
