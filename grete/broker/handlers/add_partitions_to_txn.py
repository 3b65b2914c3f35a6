"""AddPartitionsToTxn (24): a transactional producer registers partitions before writing to them.

Versions 0-3 are the client's form (one transaction per request). v4 is the brokers' form (KIP-890
part 1): several transactions per request, each either added or, with ``VerifyOnly``, only checked
(a partition leader asking before it takes a producer's first transactional batch; see
grete/broker/cluster/txn_verifier.py). As in Kafka, v4 needs CLUSTER_ACTION (a principal without it
gets CLUSTER_AUTHORIZATION_FAILED for the whole request) and no topic authorization. v5 is what a
leader sends for a transaction version 2 client (KIP-890 part 2): an add from it makes the
transaction one that bumps the epoch at its end.
If any partition of a transaction is unknown, Kafka adds none: the unknown ones get
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

from grete.broker.groups.transactions import fenced_error
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.coordinator.transactions.txn import TV2
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


TransactionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
BROKER_VERSION = 4  # from here on the request comes from a broker
TV2_VERSION = 5


@api(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle(ctx: RequestContext[Transactions], request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    if ctx.version >= BROKER_VERSION:
        return await _handle_batch(ctx, request)
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    if not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_by_topic(
            dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
    errors = {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED for t, p in wanted
              if not allowed(ctx, Op.WRITE, Res.TOPIC, t)}
    errors = errors or _unknown_partitions(ctx, wanted)
    if errors:
        results = {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    else:
        error = ctx.broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted)
        if error == ErrorCode.NONE:  # the partitions must survive a coordinator failover
            error = await ctx.broker.txn_log_replicated(request.v3_and_below_transactional_id)
        results = dict.fromkeys(wanted, fenced_error(error, ctx.version, 2))
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_by_topic(results))


async def _handle_batch(ctx: RequestContext[Transactions], request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    """v4+: every transaction of the request answered in one response."""
    if ctx.broker.authorizer is not None and not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for txn in request.transactions:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        errors = _unknown_partitions(ctx, wanted)
        if errors:
            outcome = {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        elif txn.verify_only:
            outcome = ctx.broker.txn_coordinator.verify_partitions(txn.transactional_id, txn.producer_id,
                                                                   txn.producer_epoch, wanted)
        else:
            error = ctx.broker.txn_coordinator.add_partitions(txn.transactional_id, txn.producer_id,
                                                              txn.producer_epoch, wanted,
                                                              TV2 if ctx.version >= TV2_VERSION else 0)
            if error == ErrorCode.NONE:
                error = await ctx.broker.txn_log_replicated(txn.transactional_id)
            outcome = dict.fromkeys(wanted, error)
        results.append(TransactionResult(transactional_id=txn.transactional_id, topic_results=_by_topic(outcome)))
    return AddPartitionsToTxnResponse(results_by_transaction=results)


def _unknown_partitions(ctx: RequestContext[Transactions], wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Partitions the metadata does not know (in a cluster most are hosted elsewhere)."""
    metadata = ctx.broker.metadata
    return {(t, p): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for t, p in wanted
            if (meta := metadata.topic(t)) is None or p not in meta.partitions}


def _by_topic(results: dict[tuple[str, int], ErrorCode]) -> list[TopicResult]:
    topics: dict[str, list[PartitionResult]] = {}
    for (topic, index), error in results.items():
        topics.setdefault(topic, []).append(PartitionResult(partition_index=index, partition_error_code=error))
    return [TopicResult(name=name, results_by_partition=parts) for name, parts in topics.items()]
