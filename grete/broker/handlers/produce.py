"""Produce (0): authorize, then each partition's batch through the replica layer's append path
(``grete.broker.replica.appends``: validation, KIP-890 routing, the append, the delayed produce).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

from grete.broker.replica.appends import Replicating, Verifying, partition_error
from grete.broker.requests.context import CloseConnection, RequestContext
from grete.broker.requests.leader_hints import current_leader
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ProduceRequest, ProduceResponse

PartitionResponse = ProduceResponse.PartitionProduceResponse


LEADER_HINTS_VERSION = 10  # KIP-951: CurrentLeader and NodeEndpoints when refused as not the leader
TOPIC_IDS_VERSION = 13  # KIP-516: topics named by id


@api(ApiKey.PRODUCE, 0, 13)
def handle(ctx: RequestContext[DataPlane],
           request: ProduceRequest) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse | None] | None:
    broker = ctx.broker
    acks = request.acks
    now_ms = broker.now_ms()
    failed = False
    errors = broker.metrics.api(0).errors  # Kafka's ErrorsPerSec counts each partition's error
    topics = []
    replicating: list[Replicating] = []
    verifying: list[Verifying] = []
    denied: set[str] = set()
    if broker.authorizer is not None:
        if request.transactional_id is not None and not allowed(
                ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
            if acks == 0:
                raise CloseConnection("acks=0 produce refused: transactional id not authorized")
            return _refused(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    names = _names(ctx, request)
    if broker.authorizer is not None:
        denied = {name for name in names if name is not None and not allowed(ctx, Op.WRITE, Res.TOPIC, name)}
    for topic_data, name in zip(request.topic_data, names, strict=True):
        responses = []
        for part in topic_data.partition_data:
            if name is None:
                response = partition_error(KafkaError(ErrorCode.UNKNOWN_TOPIC_ID), part.index)
            elif name in denied:
                response = partition_error(KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED), part.index)
            else:
                response = broker.appends.append_records(ctx.version, name, part.index, part.records, acks, now_ms,
                                                         replicating, request.transactional_id, verifying)
            failed = failed or response.error_code != 0
            if not (replicating and replicating[-1][0] is response) and not (verifying and verifying[-1].answer is response):
                errors[response.error_code] = errors.get(response.error_code, 0) + 1
            responses.append(response)
        topics.append(ProduceResponse.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id,
                                                           partition_responses=responses))
    produced = ProduceResponse(responses=topics)
    if verifying:
        ctx.holds_connection = True
        return _verify_then_append(ctx, request, names, produced, verifying, replicating, failed)
    return _answer(ctx, request, names, produced, replicating, failed)


def _answer(ctx: RequestContext[DataPlane], request: ProduceRequest, names: list[str | None], produced: ProduceResponse,
            replicating: list[Replicating], failed: bool) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse] | None:
    """The response once every batch is appended: none for acks=0 (a failure closes the connection,
    as Kafka does), with leader hints, after the delayed produce for acks=all."""
    if request.acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return None
    if failed and ctx.version >= LEADER_HINTS_VERSION:
        _leader_hints(ctx, names, produced)
    if replicating:
        return _await_replication(ctx, produced, replicating, request.timeout_ms)
    return produced


def _names(ctx: RequestContext[DataPlane], request: ProduceRequest) -> list[str | None]:
    """Each topic's name: the request's, or from v13 the one its id maps to (None: an unknown id)."""
    if ctx.version < TOPIC_IDS_VERSION:
        return [t.name for t in request.topic_data]
    return [ctx.broker.topic_name_for(t.topic_id) for t in request.topic_data]


def _leader_hints(ctx: RequestContext[DataPlane], names: list[str | None], response: ProduceResponse) -> None:
    """KIP-951: a partition refused with NOT_LEADER_OR_FOLLOWER names the leader this broker knows,
    and the answer carries its endpoint."""
    endpoints: dict[int, ProduceResponse.NodeEndpoint] = {}
    for name, topic in zip(names, response.responses, strict=True):
        for answer in topic.partition_responses:
            if answer.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER or name is None:
                continue
            leader = current_leader(ctx, name, answer.index)
            answer.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader.leader_id,
                                                                     leader_epoch=leader.leader_epoch)
            if leader.endpoint is not None and leader.leader_id not in endpoints:
                host, port, rack = leader.endpoint
                endpoints[leader.leader_id] = ProduceResponse.NodeEndpoint(node_id=leader.leader_id, host=host,
                                                                           port=port, rack=rack)
    response.node_endpoints = list(endpoints.values())


async def _await_replication(ctx: RequestContext[DataPlane], response: ProduceResponse, replicating: list[Replicating],
                             timeout_ms: int) -> ProduceResponse:
    """acks=all: answer once the replica layer's delayed produce is over, counting each outcome."""
    await ctx.broker.appends.await_replication(replicating, timeout_ms)
    _count(ctx, (answer for answer, _, _ in replicating))
    return response


def _count(ctx: RequestContext[DataPlane], answers: Iterable[PartitionResponse]) -> None:
    """Kafka's ErrorsPerSec counts each partition's outcome, once it is known."""
    errors = ctx.broker.metrics.api(0).errors
    for answer in answers:
        errors[answer.error_code] = errors.get(answer.error_code, 0) + 1


async def _verify_then_append(ctx: RequestContext[DataPlane], request: ProduceRequest, names: list[str | None],
                              produced: ProduceResponse, verifying: list[Verifying], replicating: list[Replicating],
                              failed: bool) -> ProduceResponse | None:
    """KIP-890 part 1 across brokers: the parked batches appended once the transaction's coordinator
    has answered for their partitions, then answered as any other."""
    waiting = len(replicating)
    refused = await ctx.broker.appends.append_verified(ctx.version, request.transactional_id or "", request.acks,
                                                       verifying, replicating)
    failed = failed or refused
    replicated = {id(answer) for answer, _, _ in replicating[waiting:]}
    _count(ctx, (parked.answer for parked in verifying if id(parked.answer) not in replicated))
    answer = _answer(ctx, request, names, produced, replicating, failed)
    return await answer if asyncio.iscoroutine(answer) else answer


def _refused(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition refused with ``code`` (a transactional id the principal may not write)."""
    return ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name=t.name, topic_id=t.topic_id, partition_responses=[partition_error(KafkaError(code), p.index) for p in t.partition_data])
        for t in request.topic_data])
