"""Produce (0): validate each partition's batch header and CRC, append it with one write.

No per-record Python on this path: ``validate_produce_records`` reads the 61-byte header and runs
CRC32C in C; records are decoded only where semantics need it (compacted topics need keys,
configured timestamp bounds, or ``grete.produce.validation=full``). v0-2 carry legacy message sets,
which are up-converted to one v2 batch (Kafka 4.x rejects them; old clients still send them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from grete.broker.broker import Broker
from grete.broker.config import LONG_MAX
from grete.broker.replica.partition import Partition
from grete.broker.replica.txn_verification import produce_error
from grete.broker.replica.verification_guards import VerificationGuard
from grete.broker.requests.context import CloseConnection, RequestContext
from grete.broker.requests.leader_hints import current_leader
from grete.broker.requests.registry import api
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.transactions.txn import TV2
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ProduceRequest, ProduceResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.validate import RecordValidationError, validate_produce_records
from grete.protocol.topics import INTERNAL_TOPICS

PartitionResponse = ProduceResponse.PartitionProduceResponse


LEADER_HINTS_VERSION = 10  # KIP-951: CurrentLeader and NodeEndpoints when refused as not the leader
ABORTABLE_VERSION = 11  # KIP-890: the client knows TRANSACTION_ABORTABLE
ADD_PARTITION_VERSION = 12  # KIP-890 part 2: a transactional batch adds its partition to the transaction
TOPIC_IDS_VERSION = 13  # KIP-516: topics named by id


@api(ApiKey.PRODUCE, 0, 13)
def handle(ctx: RequestContext,
           request: ProduceRequest) -> ProduceResponse | Coroutine[Any, Any, ProduceResponse | None] | None:
    broker = ctx.broker
    acks = request.acks
    now_ms = broker.now_ms()
    full = broker.full_produce_validation
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
                response = _error(KafkaError(ErrorCode.UNKNOWN_TOPIC_ID), [], part.index)
            elif name in denied:
                response = _error(KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED), [], part.index)
            else:
                response = append_records(broker, ctx.version, name, part.index, part.records, acks, now_ms, full,
                                          replicating, request.transactional_id, verifying)
            failed = failed or response.error_code != 0
            if not (replicating and replicating[-1][0] is response) and not (verifying and verifying[-1].answer is response):
                errors[response.error_code] = errors.get(response.error_code, 0) + 1
            responses.append(response)
        topics.append(ProduceResponse.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id,
                                                           partition_responses=responses))
    produced = ProduceResponse(responses=topics)
    if verifying:
        return _verify_then_append(ctx, request, names, produced, verifying, replicating, failed)
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return None
    if failed and ctx.version >= LEADER_HINTS_VERSION:
        _leader_hints(ctx, names, produced)
    if replicating:
        return _await_replication(ctx, produced, replicating, request.timeout_ms)
    return produced


def _names(ctx: RequestContext, request: ProduceRequest) -> list[str | None]:
    """Each topic's name: the request's, or from v13 the one its id maps to (None: an unknown id)."""
    if ctx.version < TOPIC_IDS_VERSION:
        return [t.name for t in request.topic_data]
    return [ctx.broker.topic_name_for(t.topic_id) for t in request.topic_data]


def _leader_hints(ctx: RequestContext, names: list[str | None], response: ProduceResponse) -> None:
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


# acks=all in a cluster: (the partition's answer, its partition, the offset the ISR must reach)
Replicating = tuple[PartitionResponse, Partition, int]


async def _await_replication(ctx: RequestContext, response: ProduceResponse, replicating: list[Replicating],
                             timeout_ms: int) -> ProduceResponse:
    """Kafka's DelayedProduce: answer once every partition's high watermark has passed the appended
    batch (parked futures on the partitions, no polling), or with the error it came to."""
    outcomes = await asyncio.gather(*(partition.wait_for_replication(offset, timeout_ms)
                                      for _, partition, offset in replicating))
    errors = ctx.broker.metrics.api(0).errors
    for (answer, _, _), outcome in zip(replicating, outcomes, strict=True):
        errors[outcome] = errors.get(outcome, 0) + 1
        if outcome != ErrorCode.NONE:
            answer.error_code = outcome
            answer.error_message = None
            if outcome != ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                answer.base_offset = answer.log_append_time_ms = answer.log_start_offset = -1
    return response


@dataclass
class Verifying:
    """A transactional batch parked until the coordinator on another broker has confirmed (or
    added) its partition; ``answer`` is its slot in the response, filled in then."""

    answer: PartitionResponse
    partition: Partition
    batch: RecordBatch
    guard: VerificationGuard
    size: int


def append_records(broker: Broker, version: int, topic: str, index: int, records: object, acks: int,
                   now_ms: int, full: bool, replicating: list[Replicating],
                   transactional_id: str | None = None,
                   verifying: list[Verifying] | None = None) -> ProduceResponse.PartitionProduceResponse:
    """One partition's produce: validate, append, answer. Also the direct path's (it calls this for
    every batch a direct producer announces, so both paths validate and append alike). A
    transactional batch whose coordinator is on another broker is not appended here but parked in
    ``verifying`` (without that list, as on the direct path, it is appended unverified)."""
    try:
        if acks not in (-1, 0, 1):
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
        if topic in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Cannot append to internal topic {topic}")
        partition = broker.partition(topic, index)
        cfg = partition.config
        # A bound into the past needs every record read; the future bound alone (Kafka 4's default,
        # 1 h) is checked on the batch header unless the header shows a record may break it.
        bounded = cfg.message_timestamp_before_max_ms != LONG_MAX
        if records is not None and not isinstance(records, bytes | bytearray | memoryview):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "records not received as bytes")
        batch = validate_produce_records(
            records, produce_version=version, compacted=cfg.compact,
            max_message_bytes=cfg.max_message_bytes, timestamp_type=cfg.message_timestamp_type,
            timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_max_ms, now_ms=now_ms,
            deep=full or cfg.compact or bounded)
        if batch.is_transactional:
            if broker.coordinates_transactions_of(transactional_id):
                if version >= ADD_PARTITION_VERSION:
                    _add_to_transaction(broker, batch, transactional_id, topic, index)
                else:
                    _verify_transaction(broker, batch, topic, index, version)
            elif verifying is not None and transactional_id is not None and (
                    version >= ADD_PARTITION_VERSION or broker.config.get_bool("transaction.partition.verification.enable")):
                if not partition.is_leader:  # refused now, not after a round trip to the coordinator
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                     f"this broker is not the leader of {topic}-{index}")
                guard = partition.start_verification(batch.producer_id, batch.producer_epoch, now_ms)
                if guard is not None:
                    if acks == -1:
                        partition.check_enough_replicas()
                    parked = PartitionResponse(index=index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                                               log_start_offset=-1)
                    # The batch is a view of the connection's receive buffer, which is reused once
                    # this handler returns: a parked batch keeps a copy of its own.
                    kept = RecordBatch(bytearray(batch.bytes_view()))
                    verifying.append(Verifying(parked, partition, kept, guard, _records_bytes(records)))
                    return parked
        if acks == -1:
            partition.check_enough_replicas()
        result = partition.append(batch, now_ms)
        broker.metrics.produced(topic, batch.records_count, batch.size)
    except RecordValidationError as exc:
        broker.metrics.produce_failed(topic, _records_bytes(records))
        return _error(exc, [ProduceResponse.BatchIndexAndErrorMessage(
            batch_index=i, batch_index_error_message=message) for i, message in exc.record_errors],
            index)
    except KafkaError as exc:
        broker.metrics.produce_failed(topic, _records_bytes(records))
        return _error(exc, [], index)
    answer = PartitionResponse(index=index, error_code=0, base_offset=result.base_offset,
                               log_append_time_ms=result.log_append_time,
                               log_start_offset=result.log_start_offset)
    if acks == -1 and partition.has_followers:
        replicating.append((answer, partition, result.last_offset + 1))
    return answer


async def _verify_then_append(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
                              produced: ProduceResponse, verifying: list[Verifying], replicating: list[Replicating],
                              failed: bool) -> ProduceResponse | None:
    """KIP-890 part 1 across brokers: ask the transaction's coordinator about the parked batches'
    partitions (one request for them all), then append those it confirmed, each only while its
    verification guard still stands (a marker written meanwhile ends the guard)."""
    broker = ctx.broker
    version = ctx.version
    refused = await _ask_coordinator(broker, request.transactional_id or "", verifying, version >= ADD_PARTITION_VERSION)
    now_ms = broker.now_ms()
    errors = broker.metrics.api(0).errors
    for parked in verifying:
        answer, partition = parked.answer, parked.partition
        error = refused.get((partition.topic, partition.index))
        try:
            if error is not None:
                code, message = produce_error(error, version)
                raise KafkaError(code, message)
            result = partition.append(parked.batch, now_ms, parked.guard)
        except KafkaError as exc:
            failed = True
            broker.metrics.produce_failed(partition.topic, parked.size)
            answer.error_code, answer.error_message = exc.code, exc.message
            errors[exc.code] = errors.get(exc.code, 0) + 1
            continue
        broker.metrics.produced(partition.topic, parked.batch.records_count, parked.batch.size)
        answer.base_offset, answer.log_append_time_ms = result.base_offset, result.log_append_time
        answer.log_start_offset = result.log_start_offset
        if request.acks == -1 and partition.has_followers:
            replicating.append((answer, partition, result.last_offset + 1))
        else:
            errors[0] = errors.get(0, 0) + 1
    if request.acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return None
    if failed and version >= LEADER_HINTS_VERSION:
        _leader_hints(ctx, names, produced)
    if replicating:
        return await _await_replication(ctx, produced, replicating, request.timeout_ms)
    return produced


async def _ask_coordinator(broker: Broker, transactional_id: str, verifying: list[Verifying],
                           add: bool) -> dict[tuple[str, int], ErrorCode]:
    """The parked partitions the coordinator did not confirm (or add), with its error. A request's
    transactional batches come from one producer; a batch of another is refused as Kafka does."""
    first = verifying[0].batch
    pid, epoch = first.producer_id, first.producer_epoch
    strangers = {(v.partition.topic, v.partition.index): ErrorCode.INVALID_PRODUCER_ID_MAPPING
                 for v in verifying if (v.batch.producer_id, v.batch.producer_epoch) != (pid, epoch)}
    wanted = [(v.partition.topic, v.partition.index) for v in verifying
              if (v.partition.topic, v.partition.index) not in strangers]
    coordinator = broker.txn_coordinator_node(transactional_id)
    if coordinator is None or broker.txn_verifier is None:
        return {**dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE), **strangers}
    if coordinator == broker.node_id:  # leadership of its state partition came here meanwhile
        txns = broker.txn_coordinator
        if add:
            error = txns.add_partitions(transactional_id, pid, epoch, wanted, TV2)
            found = dict.fromkeys(wanted, error)
        else:
            found = txns.verify_partitions(transactional_id, pid, epoch, wanted)
        return {**{tp: e for tp, e in found.items() if e != ErrorCode.NONE}, **strangers}
    refused = await broker.txn_verifier.verify(coordinator, transactional_id, pid, epoch, wanted, add=add)
    return {**refused, **strangers}


def _refused(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    """Every partition refused with ``code`` (a transactional id the principal may not write)."""
    return ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name=t.name, topic_id=t.topic_id, partition_responses=[_error(KafkaError(code), [], p.index) for p in t.partition_data])
        for t in request.topic_data])


def _verify_transaction(broker: Broker, batch: RecordBatch, topic: str, index: int, version: int) -> None:
    """A transactional batch is accepted only into a partition its transaction added (KIP-890).
    A batch outside its transaction is TRANSACTION_ABORTABLE to a client that knows that code
    (v11+, Kafka's genericErrorSupported), INVALID_TXN_STATE before."""
    error = broker.txn_coordinator.verify_partition(batch.producer_id, batch.producer_epoch, (topic, index))
    if error == ErrorCode.INVALID_TXN_STATE and version >= ABORTABLE_VERSION:
        error = ErrorCode.TRANSACTION_ABORTABLE
    if error:
        raise KafkaError(error, f"producer {batch.producer_id} has no ongoing transaction with {topic}-{index}")


def _add_to_transaction(broker: Broker, batch: RecordBatch, transactional_id: str | None, topic: str,
                        index: int) -> None:
    """From v12 (Kafka's ADD_PARTITION operation) the batch adds its partition to its producer's
    transaction, as AddPartitionsToTxn would, instead of only being checked against it."""
    error = broker.txn_coordinator.add_partitions(transactional_id or "", batch.producer_id,
                                                  batch.producer_epoch, [(topic, index)], TV2)
    if error == ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # as Kafka's AddPartitionsToTxnManager converts it
    if error:
        raise KafkaError(error, f"producer {batch.producer_id} could not add {topic}-{index} to its transaction")


def _error(exc: KafkaError, record_errors: list[ProduceResponse.BatchIndexAndErrorMessage],
           index: int) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=exc.code, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=record_errors, error_message=exc.message)


def _records_bytes(records: object) -> int:
    return len(records) if isinstance(records, bytes | bytearray | memoryview) else 0
