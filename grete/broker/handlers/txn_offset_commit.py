"""TxnOffsetCommit (28): offsets committed as part of a transaction (consume-transform-produce).

The transaction must have added the group's offsets partition (AddOffsetsToTxn) first, else
INVALID_TXN_STATE, or from v4 (KIP-890 part 1) TRANSACTION_ABORTABLE, as Kafka 4.3.1 answers (its
verification's error, converted for older clients); in a cluster whose transaction coordinator is
on another broker, that broker is asked (AddPartitionsToTxn v4, verify-only). The offsets become
visible to OffsetFetch when the transaction commits. v5 is transaction version 2 (KIP-890 part 2): no AddOffsetsToTxn comes
first, the commit itself adds the group's offsets partition to the transaction (at the coordinator,
on this broker or through AddPartitionsToTxn v5 to another)."""

from __future__ import annotations

from grete.broker.handlers.offset_commit import split_unknown
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.groups.group_types import OffsetCommit
from grete.coordinator.transactions.txn import TV2
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, TxnOffsetCommitRequest, TxnOffsetCommitResponse
from grete.protocol.topics import OFFSETS_TOPIC

ADD_VERSION = 5  # transaction version 2: the commit adds the group's partition


@api(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def handle(ctx: RequestContext[Transactions], request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    commits = [OffsetCommit(topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata)
               for topic in request.topics for p in topic.partitions]
    refused = _refused(ctx, request)
    if refused is not None:
        known: list[OffsetCommit] = []
        errors = {(c.topic, c.partition): int(refused) for c in commits}
    else:
        denied = {c.topic for c in commits if not allowed(ctx, Op.READ, Res.TOPIC, c.topic)}
        known, errors = split_unknown(ctx, [c for c in commits if c.topic not in denied])
        errors.update({(c.topic, c.partition): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                       for c in commits if c.topic in denied})
    error = await _verify(ctx, request) if refused is None else ErrorCode.NONE
    if error is ErrorCode.INVALID_TXN_STATE and ctx.version >= 4:
        error = ErrorCode.TRANSACTION_ABORTABLE
    if error is not ErrorCode.NONE:
        errors.update({(c.topic, c.partition): error for c in known})
    elif known:
        errors.update(await ctx.broker.group_coordinator.commit_txn_offsets(
            group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=request.generation_id, member_id=request.member_id,
            group_instance_id=request.group_instance_id, offsets=known))
    return TxnOffsetCommitResponse(topics=[
        TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=topic.name, partitions=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions])
        for topic in request.topics])


def _refused(ctx: RequestContext[Transactions], request: TxnOffsetCommitRequest) -> ErrorCode | None:
    if not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


async def _verify(ctx: RequestContext[Transactions], request: TxnOffsetCommitRequest) -> ErrorCode:
    if not request.group_id:
        return ErrorCode.INVALID_GROUP_ID
    coordinator = ctx.broker.group_coordinator
    error = coordinator.status_error(request.group_id)  # only the group's own partition counts
    if error is not None:
        return error
    offsets_partition = (OFFSETS_TOPIC, coordinator.partition_for(request.group_id))
    if ctx.version >= ADD_VERSION:
        return await _add(ctx, request, offsets_partition)
    if not ctx.broker.coordinates_transactions_of(request.transactional_id):
        return await _verify_remotely(ctx, request, offsets_partition)
    return ctx.broker.txn_coordinator.verify_partition(
        request.producer_id, request.producer_epoch, offsets_partition)


async def _add(ctx: RequestContext[Transactions], request: TxnOffsetCommitRequest, offsets_partition: tuple[str, int]) -> ErrorCode:
    """Transaction version 2: add the group's offsets partition to the transaction (Kafka's
    addPartition operation), unless the producer's transaction is already open on it here."""
    broker = ctx.broker
    hosted = broker.partitions.get(offsets_partition)
    if hosted is not None and hosted.has_ongoing_transaction(request.producer_id, request.producer_epoch):
        return ErrorCode.NONE
    if broker.coordinates_transactions_of(request.transactional_id):
        error = broker.txn_coordinator.add_partitions(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, [offsets_partition], TV2)
        if error == ErrorCode.NONE:
            error = await broker.txn_log_replicated(request.transactional_id)
    else:
        coordinator = broker.txn_coordinator_node(request.transactional_id)
        if coordinator is None or broker.txn_verifier is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            refused = await broker.txn_verifier.verify(coordinator, request.transactional_id, request.producer_id,
                                                       request.producer_epoch, [offsets_partition], add=True)
            error = refused.get(offsets_partition, ErrorCode.NONE)
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return _OFFSET_COMMIT_ERRORS.get(error, error)


async def _verify_remotely(ctx: RequestContext[Transactions], request: TxnOffsetCommitRequest,
                           offsets_partition: tuple[str, int]) -> ErrorCode:
    """The transaction's coordinator is on another broker: ask it (AddPartitionsToTxn v4, verify-only)
    unless the producer's transaction is already open on the group's offsets partition here, and
    answer its refusal as Kafka's group coordinator converts it for TxnOffsetCommit."""
    broker = ctx.broker
    if not broker.config.get_bool("transaction.partition.verification.enable"):
        return ErrorCode.NONE
    hosted = broker.partitions.get(offsets_partition)
    if hosted is not None and hosted.has_ongoing_transaction(request.producer_id, request.producer_epoch):
        return ErrorCode.NONE
    coordinator = broker.txn_coordinator_node(request.transactional_id)
    if coordinator is None or broker.txn_verifier is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        refused = await broker.txn_verifier.verify(coordinator, request.transactional_id, request.producer_id,
                                                   request.producer_epoch, [offsets_partition], add=False)
        error = refused.get(offsets_partition, ErrorCode.NONE)
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.INVALID_TXN_STATE  # the caller answers it as TRANSACTION_ABORTABLE from v4
    return _OFFSET_COMMIT_ERRORS.get(error, error)


# Kafka's GroupMetadataManager.maybeConvertOffsetCommitError: retriable codes a committing client
# knows how to retry.
_OFFSET_COMMIT_ERRORS = {
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
