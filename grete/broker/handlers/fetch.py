"""Fetch (1): file slices of the log, long-polled on parked futures.

The records of each partition are the storage layer's file slices, written to the socket with
sendfile (large) or pread (small) by the connection; nothing here touches record bytes. A fetch
that finds fewer than ``min_bytes`` parks one future per partition and is woken by the next append
(or by its ``max_wait_ms`` timer). Fetch sessions (KIP-227) are not kept: the response's session id
0 tells clients to keep sending full fetches, which every client supports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from grete.broker.context import RequestContext
from grete.broker.partition import Partition
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import FetchRequest, FetchResponse

READ_COMMITTED = 1
PartitionData = FetchResponse.PartitionData


@api(1, 4, 12)
def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Coroutine[Any, Any, FetchResponse]:
    if request.session_id != 0 and request.session_epoch > 0:
        # We never hand out sessions, so an incremental fetch names one we do not know.
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    response, total, parked = _read(ctx, request)
    if request.max_wait_ms <= 0 or total >= max(request.min_bytes, 1) or not parked:
        return response
    return _long_poll(ctx, request, parked)


def _read(ctx: RequestContext, request: FetchRequest) -> tuple[FetchResponse, int, list[Partition]]:
    """One pass over the requested partitions: (response, bytes found, partitions to wait on)."""
    remaining = request.max_bytes
    total = 0
    waitable: list[Partition] = []
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            data, partition = _read_partition(ctx, request, topic.topic, wanted, remaining, total == 0)
            size = _records_size(data.records)
            total += size
            remaining = max(remaining - size, 0)
            if partition is not None:
                waitable.append(partition)
            partitions.append(data)
        topics.append(FetchResponse.FetchableTopicResponse(topic=topic.topic, topic_id=topic.topic_id,
                                                           partitions=partitions))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics), total, waitable


def _read_partition(ctx: RequestContext, request: FetchRequest, topic: str,
                    wanted: FetchRequest.FetchPartition, remaining: int,
                    first: bool) -> tuple[PartitionData, Partition | None]:
    try:
        partition = ctx.broker.partition(topic, wanted.partition)
        partition.check_leader_epoch(wanted.current_leader_epoch)
        committed = request.isolation_level == READ_COMMITTED
        upper = partition.last_stable_offset if committed else partition.high_watermark
        offset = wanted.fetch_offset
        if offset < partition.log_start_offset or offset > partition.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        records: Any = b""
        if offset < upper:
            # KIP-74: the first partition with data returns at least one whole batch.
            result = partition.log.read(offset, min(wanted.partition_max_bytes, remaining),
                                        upper_bound=upper, min_one=first)
            if result.size:
                records = result
        aborted = (partition.log.aborted_transactions(offset, upper) if committed else None)
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


def _records_size(records: Any) -> int:
    if records is None:
        return 0
    size = getattr(records, "size", None)
    return int(size) if size is not None else len(records)


async def _long_poll(ctx: RequestContext, request: FetchRequest,
                     parked: list[Partition]) -> FetchResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while True:
        timeout = deadline - loop.time()
        if timeout <= 0:
            break
        waiters = [(p, p.waiter()) for p in parked]
        done, _ = await asyncio.wait([w for _, w in waiters], timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        for partition, waiter in waiters:
            partition.discard_waiter(waiter)
        if not done:
            break
        response, total, parked = _read(ctx, request)
        if total >= request.min_bytes or not parked:
            return response
    return _read(ctx, request)[0]
