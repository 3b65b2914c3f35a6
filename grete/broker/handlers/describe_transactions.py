"""DescribeTransactions (65): a transactional id's state, producer, timeout and partitions."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse

State = DescribeTransactionsResponse.TransactionState


@api(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
def handle(ctx: RequestContext[Transactions], request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coordinator = ctx.broker.txn_coordinator
    states = []
    for txn_id in request.transactional_ids:
        if not allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, txn_id):
            states.append(_failed(txn_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        if not txn_id:
            states.append(_failed(txn_id, ErrorCode.INVALID_REQUEST))
            continue
        meta = coordinator.describe(txn_id)
        if meta is None:
            states.append(_failed(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(State(
            error_code=ErrorCode.NONE, transactional_id=txn_id, transaction_state=meta.state.kafka_name,
            transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,  # kept once it ends, as Kafka's
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[DescribeTransactionsResponse.TopicData(topic=t, partitions=p) for t, p in by_topic.items()]))
    return DescribeTransactionsResponse(transaction_states=states)


def _failed(txn_id: str, error: ErrorCode) -> State:
    """Kafka's answer for a transactional id it does not describe: the error, every other field at
    the schema's default (0, not -1)."""
    return State(error_code=error, transactional_id=txn_id, transaction_state="", transaction_timeout_ms=0,
                 transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])
