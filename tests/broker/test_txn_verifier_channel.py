"""The leader's AddPartitionsToTxn channel to a coordinator broker (Kafka's AddPartitionsToTxnManager):
one request in flight per broker, what arrives meanwhile goes in the next one, one entry per
transactional id (an older epoch is fenced, the same epoch is told to retry), and a failed
channel fails what it carried. The coordinator is a scripted peer."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from grete.broker.broker import Broker
from grete.broker.cluster.peer import PeerError
from grete.broker.cluster.txn_verifier import ClusterTxnVerifier
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.coordinator.zookeeper.zk_layout import EndPoint
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from tests.coordinator._support import async_test

TP = ("t", 0)


class _Config:
    def get_int(self, key: str) -> int:
        return 30_000


class _Broker:
    node_id = 1
    config = _Config()

    def __init__(self) -> None:
        self.metrics = BrokerMetrics()

    def broker_endpoint(self, broker_id: int, listener: str) -> EndPoint | None:
        return EndPoint(listener, "127.0.0.1", 9000 + broker_id, "PLAINTEXT")


class _Coordinator:
    """Answers each request when the test releases it; records what it was sent."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sent: list[tuple[int, AddPartitionsToTxnRequest]] = []
        self.release: asyncio.Queue[ErrorCode | PeerError | dict[str, ErrorCode]] = asyncio.Queue()

    async def call(self, request: AddPartitionsToTxnRequest, version: int) -> Any:
        self.sent.append((version, request))
        outcome = await self.release.get()
        if isinstance(outcome, PeerError):
            raise outcome
        if isinstance(outcome, ErrorCode):
            return AddPartitionsToTxnResponse(error_code=outcome)
        Result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
        TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult
        return AddPartitionsToTxnResponse(results_by_transaction=[Result(transactional_id=t.transactional_id, topic_results=[
            TopicResult(name=topic.name, results_by_partition=[
                PartitionResult(partition_index=p, partition_error_code=outcome.get(t.transactional_id, ErrorCode.NONE))
                for p in topic.partitions]) for topic in t.topics]) for t in request.transactions])

    def close(self) -> None:
        pass


def _verifier() -> tuple[ClusterTxnVerifier, _Coordinator]:
    verifier = ClusterTxnVerifier(cast(Broker, _Broker()), "PLAINTEXT")
    channel = verifier._channel(2)
    assert channel is not None
    fake = _Coordinator(channel.peer.host, channel.peer.port)
    channel.peer = fake  # type: ignore[assignment]
    return verifier, fake


@async_test
async def test_one_request_in_flight_and_the_rest_batched() -> None:
    verifier, coordinator = _verifier()
    first = asyncio.ensure_future(verifier.verify(2, "a", 1, 0, [TP], add=False))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(verifier.verify(2, "b", 2, 0, [TP], add=False))
    third = asyncio.ensure_future(verifier.verify(2, "c", 3, 0, [TP], add=True))
    await asyncio.sleep(0)
    assert len(coordinator.sent) == 1  # b and c wait for a's answer
    coordinator.release.put_nowait({"a": ErrorCode.TRANSACTION_ABORTABLE})
    assert await first == {TP: ErrorCode.TRANSACTION_ABORTABLE}
    await asyncio.sleep(0)
    version, batched = coordinator.sent[1]
    assert version == 5 and [(t.transactional_id, t.verify_only) for t in batched.transactions] == [
        ("b", True), ("c", False)]  # one add in the batch: v5
    assert coordinator.sent[0][0] == 4
    coordinator.release.put_nowait({})
    assert await second == {} and await third == {}


@async_test
async def test_one_entry_per_transactional_id() -> None:
    verifier, coordinator = _verifier()
    busy = asyncio.ensure_future(verifier.verify(2, "other", 9, 0, [TP], add=False))
    await asyncio.sleep(0)
    older = asyncio.ensure_future(verifier.verify(2, "a", 1, 3, [TP], add=False))
    await asyncio.sleep(0)
    assert await verifier.verify(2, "a", 1, 2, [TP], add=False) == {TP: ErrorCode.INVALID_PRODUCER_EPOCH}
    # The same producer again (a pipelined produce, or a retry): it joins the check waiting, for
    # its own partitions; neither is failed.
    retry = asyncio.ensure_future(verifier.verify(2, "a", 1, 3, [TP, ("t", 1)], add=False))
    await asyncio.sleep(0)
    assert not older.done() and not retry.done()
    newer = asyncio.ensure_future(verifier.verify(2, "a", 1, 4, [TP], add=False))
    await asyncio.sleep(0)
    assert await older == {TP: ErrorCode.INVALID_PRODUCER_EPOCH}  # fenced by the newer epoch
    assert await retry == {TP: ErrorCode.INVALID_PRODUCER_EPOCH, ("t", 1): ErrorCode.INVALID_PRODUCER_EPOCH}
    coordinator.release.put_nowait({})
    assert await busy == {}
    await asyncio.sleep(0)
    coordinator.release.put_nowait({})
    assert await newer == {}
    assert [t.producer_epoch for t in coordinator.sent[1][1].transactions] == [4]


@async_test
async def test_pipelined_produces_of_one_producer_share_one_check_in_order() -> None:
    """Produces of one transaction pipelined on a connection: one AddPartitionsToTxn for all of them,
    each answered for its partitions and resumed in the order it asked (so batches append in their
    sequence order)."""
    verifier, coordinator = _verifier()
    busy = asyncio.ensure_future(verifier.verify(2, "other", 9, 0, [TP], add=False))
    await asyncio.sleep(0)
    resumed: list[int] = []

    async def produce(n: int, partition: int) -> dict[tuple[str, int], ErrorCode]:
        outcome = await verifier.verify(2, "a", 1, 0, [("t", partition)], add=False)
        resumed.append(n)
        return outcome
    produces = [asyncio.ensure_future(produce(n, p)) for n, p in enumerate((0, 1, 0))]
    await asyncio.sleep(0)
    coordinator.release.put_nowait({})
    assert await busy == {}
    await asyncio.sleep(0)
    coordinator.release.put_nowait({"a": ErrorCode.TRANSACTION_ABORTABLE})
    abortable = ErrorCode.TRANSACTION_ABORTABLE
    assert [await p for p in produces] == [{("t", 0): abortable}, {("t", 1): abortable}, {("t", 0): abortable}]
    assert resumed == [0, 1, 2]
    (sent,) = coordinator.sent[1][1].transactions
    assert (sent.transactional_id, sorted((t.name, p) for t in sent.topics for p in t.partitions)) == (
        "a", [("t", 0), ("t", 1)])


@async_test
async def test_a_failed_channel_fails_what_it_carried() -> None:
    verifier, coordinator = _verifier()
    lost = asyncio.ensure_future(verifier.verify(2, "a", 1, 0, [TP, ("t", 1)], add=False))
    await asyncio.sleep(0)
    coordinator.release.put_nowait(PeerError("connection reset"))
    assert await lost == {TP: ErrorCode.NETWORK_EXCEPTION, ("t", 1): ErrorCode.NETWORK_EXCEPTION}
    refused = asyncio.ensure_future(verifier.verify(2, "a", 1, 0, [TP], add=False))
    await asyncio.sleep(0)
    coordinator.release.put_nowait(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert await refused == {TP: ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    metrics = verifier.broker.metrics  # Kafka's VerificationTimeMs and VerificationFailureRate
    assert (metrics.txn_verification_time.count, metrics.txn_verification_failures) == (2, 2)
    verifier.close()
