"""AddPartitionsToTxn from a partition leader to transaction coordinators on other brokers (Kafka's
AddPartitionsToTxnManager): the batched broker form (v4) with ``VerifyOnly`` set for KIP-890 part 1,
unset when a produce adds its partition itself (part 2).

Per coordinator broker, one request is in flight; what arrives meanwhile waits for the next one,
which carries every waiting transaction. Each waiting produce holds a future that the answer (or
the failure of the channel) resolves: nothing polls. At most one entry per transactional id waits
per broker: a newer epoch fences the one waiting (INVALID_PRODUCER_EPOCH), the same producer's joins
it (pipelined produces, or a retry: whichever appends second finds its batch a duplicate).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from grete.broker.broker import Broker
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

log = logging.getLogger(__name__)

# Kafka 3.9's inter-broker AddPartitionsToTxn (the first batched version) for verification; v5 when
# the leader adds for a transaction version 2 client (the coordinator then bumps at the end).
ADD_PARTITIONS_TO_TXN_VERSION = 4
TV2_ADD_PARTITIONS_TO_TXN_VERSION = 5
TopicPartition = tuple[str, int]
Outcome = dict[TopicPartition, ErrorCode]


@dataclass
class _Waiting:
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    add: bool
    answer: asyncio.Future[Outcome] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def settle(self, outcome: Outcome) -> None:
        if not self.answer.done():
            self.answer.set_result(outcome)

    def fail(self, error: ErrorCode) -> None:
        self.settle(dict.fromkeys(self.partitions, error))


class _CoordinatorChannel:
    """The transactions waiting for one coordinator broker, and its one request in flight."""

    def __init__(self, peer: PeerConnection) -> None:
        self.peer = peer
        self.waiting: dict[str, _Waiting] = {}
        self.sending: asyncio.Task[None] | None = None


class ClusterTxnVerifier:
    def __init__(self, broker: Broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self._channels: dict[int, _CoordinatorChannel] = {}

    async def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool) -> Outcome:
        """The partitions not confirmed, with their error (empty: all verified or added); timed and
        counted as Kafka's AddPartitionsToTxnManager (VerificationTimeMs, VerificationFailureRate)."""
        started = time.monotonic()
        outcome = await self._verify(coordinator, transactional_id, producer_id, producer_epoch, partitions, add=add)
        metrics = self.broker.metrics
        metrics.txn_verification_time.observe((time.monotonic() - started) * 1000)
        if outcome:
            metrics.txn_verification_failures += 1
        return outcome

    async def _verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition], *, add: bool) -> Outcome:
        channel = self._channel(coordinator)
        if channel is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        existing = channel.waiting.get(transactional_id)
        if existing is not None:
            if producer_epoch < existing.producer_epoch:
                return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_EPOCH)  # the newcomer is fenced
            if (existing.producer_id, existing.producer_epoch, existing.add) == (producer_id, producer_epoch, add):
                # The same producer's produces, pipelined on one connection (grete reads the next
                # request before answering the last, where Kafka mutes the connection): one check
                # for them all, answered in the order they asked, so they append in their sequence
                # order. Settling the first as a retry would fail every batch but the last (which
                # the client then counts as delivering the ones before it).
                existing.partitions += [tp for tp in partitions if tp not in existing.partitions]
                return _theirs(await asyncio.shield(existing.answer), partitions)
            existing.fail(ErrorCode.INVALID_PRODUCER_EPOCH)  # a newer epoch fences it
        incoming = _Waiting(producer_id, producer_epoch, list(partitions), add)
        channel.waiting[transactional_id] = incoming
        if channel.sending is None:
            channel.sending = asyncio.ensure_future(self._send_while_waiting(coordinator, channel))
        return _theirs(await asyncio.shield(incoming.answer), partitions)

    def _channel(self, coordinator: int) -> _CoordinatorChannel | None:
        endpoint = self.broker.broker_endpoint(coordinator, self.listener)
        if endpoint is None:
            return None
        channel = self._channels.get(coordinator)
        if channel is None or (channel.peer.host, channel.peer.port) != (endpoint.host, endpoint.port):
            if channel is not None:  # the broker moved: what waited for the old address is retried
                for waiting in channel.waiting.values():
                    waiting.fail(ErrorCode.NETWORK_EXCEPTION)
                channel.waiting = {}
                channel.peer.close()  # a request in flight there fails (and fails its batch)
            channel = self._channels[coordinator] = _CoordinatorChannel(PeerConnection(
                endpoint.host, endpoint.port, f"txn-verify-{self.broker.node_id}",
                timeout_s=self.broker.config.get_int("request.timeout.ms") / 1000))
        return channel

    async def _send_while_waiting(self, coordinator: int, channel: _CoordinatorChannel) -> None:
        try:
            while channel.waiting:
                batch, channel.waiting = channel.waiting, {}
                await self._send(coordinator, channel.peer, batch)
        finally:
            channel.sending = None

    async def _send(self, coordinator: int, peer: PeerConnection, batch: dict[str, _Waiting]) -> None:
        request = AddPartitionsToTxnRequest(transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=txn_id, producer_id=w.producer_id, producer_epoch=w.producer_epoch,
                verify_only=not w.add, topics=_topics(w.partitions))
            for txn_id, w in batch.items()])
        version = (TV2_ADD_PARTITIONS_TO_TXN_VERSION if any(w.add for w in batch.values())
                   else ADD_PARTITIONS_TO_TXN_VERSION)
        try:
            response: AddPartitionsToTxnResponse = await peer.call(request, version)
        except PeerError as exc:
            log.warning("AddPartitionsToTxn to broker %d failed: %s", coordinator, exc)
            for waiting in batch.values():
                waiting.fail(ErrorCode.NETWORK_EXCEPTION)
            return
        except BaseException:  # cancelled at shutdown, or a bug: no produce may wait forever
            for waiting in batch.values():
                waiting.fail(ErrorCode.NETWORK_EXCEPTION)
            raise
        if response.error_code != ErrorCode.NONE:
            log.error("AddPartitionsToTxn to broker %d answered %s", coordinator, ErrorCode(response.error_code).name)
            for waiting in batch.values():
                waiting.fail(ErrorCode(response.error_code))
            return
        for result in response.results_by_transaction:
            answered = batch.pop(result.transactional_id, None)
            if answered is not None:
                answered.settle({(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                                for t in result.topic_results for p in t.results_by_partition
                                if p.partition_error_code != ErrorCode.NONE})
        for waiting in batch.values():  # not answered at all: the coordinator's fault, retriable
            waiting.fail(ErrorCode.NETWORK_EXCEPTION)

    def close(self) -> None:
        for channel in self._channels.values():
            if channel.sending is not None:
                channel.sending.cancel()
            for waiting in channel.waiting.values():
                waiting.fail(ErrorCode.NETWORK_EXCEPTION)
            channel.peer.close()
        self._channels.clear()


def _theirs(outcome: Outcome, partitions: list[TopicPartition]) -> Outcome:
    """The part of a shared check's outcome that concerns one produce's partitions."""
    return {tp: error for tp, error in outcome.items() if tp in partitions}


def _topics(partitions: list[TopicPartition]) -> list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
