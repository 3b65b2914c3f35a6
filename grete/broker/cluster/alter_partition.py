"""A leader's ISR changes, sent to the controller as AlterPartition (Kafka's AlterPartitionManager).

Proposals are batched: every change queued while a request is in flight goes in the next one. An
answer settles each partition (``Partition.isr_change_answered``); a request that fails as a whole
(controller moved, unreachable) is sent again to whoever is controller then, as Kafka retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.replica.partition import Partition
from grete.coordinator.zookeeper.zk_layout import BrokerInfo
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AlterPartitionRequest, AlterPartitionResponse

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 2  # topic ids, a plain ISR list (v3's per-member epochs: -1 in ZooKeeper mode)
RETRY_BACKOFF_S = 0.1


class AlterPartitionManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], controller: Callable[[], BrokerInfo | None],
                 listener: str) -> None:
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._controller = controller
        self.listener = listener
        self._pending: dict[tuple[str, int], tuple[Partition, list[int]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._peer: PeerConnection | None = None

    def submit(self, partition: Partition, isr: list[int]) -> None:
        self._pending[(partition.topic, partition.index)] = (partition, list(isr))
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        self._wake.set()

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._peer is not None:
            self._peer.close()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            batch = {k: v for k, v in batch.items() if v[0].is_leader}
            if not batch:
                continue
            try:
                response = await self._send(batch)
            except Exception:  # noqa: BLE001 - this task carries every ISR change of the broker: it must live on
                log.exception("AlterPartition to the controller failed")
                response = None
            if response is None or response.error_code != ErrorCode.NONE:
                # Not the controller any more, a stale broker epoch, unreachable: send again.
                self._retry_later(batch)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            unanswered = self._settle(batch, response)
            if unanswered:
                self._retry_later(unanswered)
                await asyncio.sleep(RETRY_BACKOFF_S)

    def _retry_later(self, batch: dict[tuple[str, int], tuple[Partition, list[int]]]) -> None:
        for key, entry in batch.items():
            self._pending.setdefault(key, entry)  # a newer proposal queued meanwhile wins
        self._wake.set()

    async def _send(self, batch: dict[tuple[str, int], tuple[Partition, list[int]]]) -> AlterPartitionResponse | None:
        controller = self._controller()
        endpoint = controller.endpoint(self.listener) if controller is not None else None
        if endpoint is None:
            return None
        if self._peer is None or (self._peer.host, self._peer.port) != (endpoint.host, endpoint.port):
            if self._peer is not None:
                self._peer.close()
            self._peer = PeerConnection(endpoint.host, endpoint.port, f"broker-{self.broker_id}-alter-partition")
        topics: dict[str, AlterPartitionRequest.TopicData] = {}
        for (topic, index), (partition, isr) in sorted(batch.items()):
            data = topics.setdefault(topic, AlterPartitionRequest.TopicData(topic_name=topic, topic_id=partition.topic_id))
            data.partitions.append(AlterPartitionRequest.PartitionData(
                partition_index=index, leader_epoch=partition.leader_epoch, new_isr=isr,
                leader_recovery_state=0, partition_epoch=partition.partition_epoch))
        request = AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=self._broker_epoch(),
                                        topics=list(topics.values()))
        try:
            response: AlterPartitionResponse = await self._peer.call(request, ALTER_PARTITION_VERSION)
            return response
        except PeerError as exc:
            log.info("AlterPartition to the controller failed: %s", exc)
            return None

    def _settle(self, batch: dict[tuple[str, int], tuple[Partition, list[int]]], response: AlterPartitionResponse
                ) -> dict[tuple[str, int], tuple[Partition, list[int]]]:
        """Each answered partition settled; the ones the answer left out, to be sent again."""
        answered = set()
        by_id = {partition.topic_id: topic for (topic, _), (partition, _) in batch.items()}
        for topic_data in response.topics:
            topic = by_id.get(topic_data.topic_id, topic_data.topic_name)
            for p in topic_data.partitions:
                entry = batch.get((topic, p.partition_index))
                if entry is None:
                    continue
                answered.add((topic, p.partition_index))
                entry[0].isr_change_answered(ErrorCode(p.error_code), p.leader_epoch, list(p.isr), p.partition_epoch)
                if p.error_code not in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
                    log.info("AlterPartition for %s-%d: %s", topic, p.partition_index, ErrorCode(p.error_code).name)
        return {key: entry for key, entry in batch.items() if key not in answered}
