"""Which log dir holds each replica (KIP-858, AssignReplicasToDirs), both ends.

A controller places a new replica in its broker's log dir when the broker has exactly one; a broker
with several picks one itself and tells the active controller (Kafka's AssignmentsManager), as it
does when a replica moves between its dirs. The controller records it in a PartitionChangeRecord's
Directories, so that when a dir fails (the broker's heartbeat lists it offline) the controller knows
which replicas went with it and moves their leaderships away, and Metadata lists them as offline.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from grete.broker.quorum.partition_change import NO_CHANGE
from grete.coordinator.metadata import TopicMeta
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AssignReplicasToDirsRequest, AssignReplicasToDirsResponse
from grete.protocol.metadata import PartitionChangeRecord

log = logging.getLogger(__name__)

ASSIGN_VERSION = 0
RETRY_BACKOFF_S = 0.5  # Kafka's AssignmentsManager waits this long after a failed request

Key = tuple[uuid.UUID, int]  # topic id, partition
Call = Callable[[Message, int], Awaitable[Message]]
Placed = tuple[uuid.UUID, int, uuid.UUID]  # topic id, partition, log dir


# --- the controller's part ----------------------------------------------------------------------
def dir_assignments(topic_by_id: Callable[[uuid.UUID], TopicMeta | None], request: AssignReplicasToDirsRequest
                    ) -> tuple[list[Message], AssignReplicasToDirsResponse, list[Placed]]:
    """The records of a broker's assignments (one PartitionChangeRecord per replica whose dir
    changes), the answer (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER per
    partition, as Kafka's), and every replica placed, for the caller to check its dir is online."""
    Response = AssignReplicasToDirsResponse
    broker = request.broker_id
    records: list[Message] = []
    placed: list[Placed] = []
    answer = Response(error_code=ErrorCode.NONE)
    for directory in request.directories:
        answered = Response.DirectoryData(id=directory.id)
        answer.directories.append(answered)
        for topic in directory.topics:
            meta = topic_by_id(topic.topic_id)
            topic_answer = Response.TopicData(topic_id=topic.topic_id)
            answered.topics.append(topic_answer)
            for wanted in topic.partitions:
                index = wanted.partition_index
                part = meta.partitions.get(index) if meta is not None else None
                error = (ErrorCode.UNKNOWN_TOPIC_ID if meta is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                         if part is None else ErrorCode.NOT_LEADER_OR_FOLLOWER if broker not in part.replicas
                         else ErrorCode.NONE)
                topic_answer.partitions.append(Response.PartitionData(partition_index=index, error_code=error))
                if part is None or error is not ErrorCode.NONE:
                    if error is not ErrorCode.NONE:
                        log.warning("AssignReplicasToDirs from broker %d: %s for partition %d of topic id %s",
                                    broker, error.name, index, topic.topic_id)
                    continue
                placed.append((topic.topic_id, index, directory.id))
                current = part.directory(broker)
                if current == directory.id:
                    continue
                directories = (list(part.directories) if len(part.directories) == len(part.replicas)
                               else [ZERO_UUID] * len(part.replicas))
                directories[part.replicas.index(broker)] = directory.id
                records.append(PartitionChangeRecord(partition_id=index, topic_id=topic.topic_id, leader=NO_CHANGE,
                                                     directories=directories))
    return records, answer, placed


# --- the broker's part --------------------------------------------------------------------------
class DirAssignments:
    """A KRaft broker's assignments on their way to the active controller (Kafka's
    AssignmentsManager): each replica's latest dir waits until the broker is registered, then every
    waiting one goes in one request, one request at a time; a request refused as a whole (the
    controller moving, a stale epoch) is sent again, a partition refused alone is dropped and logged
    (its topic gone, or this broker no longer its replica)."""

    def __init__(self, broker_id: int, epoch: Callable[[], int], call: Call,
                 wanted: Callable[[uuid.UUID, int, uuid.UUID], bool]) -> None:
        self._broker_id = broker_id
        self._epoch = epoch  # the broker's registration epoch, -1 until registered
        self._call = call
        self._wanted = wanted  # still to tell: the image does not already say so
        self._pending: dict[Key, uuid.UUID] = {}
        self._sending: asyncio.Task[None] | None = None
        self._closed = False

    def submit(self, topic_id: uuid.UUID, index: int, directory: uuid.UUID) -> None:
        self._pending[(topic_id, index)] = directory
        self.kick()

    def kick(self) -> None:
        """Send what waits (called too once the broker has registered)."""
        if self._closed or not self._pending or self._epoch() < 0:
            return
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send_all())

    def close(self) -> None:
        self._closed = True
        if self._sending is not None:
            self._sending.cancel()

    async def _send_all(self) -> None:
        while self._pending and not self._closed and self._epoch() >= 0:
            batch = {key: d for key, d in self._pending.items() if self._wanted(key[0], key[1], d)}
            self._pending.clear()
            if batch and not await self._send(batch):
                for key, directory in batch.items():  # a newer placement submitted meanwhile wins
                    self._pending.setdefault(key, directory)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(self, batch: dict[Key, uuid.UUID]) -> bool:
        Request = AssignReplicasToDirsRequest
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for (topic_id, index), directory in sorted(batch.items()):
            by_dir.setdefault(directory, {}).setdefault(topic_id, []).append(index)
        request = Request(broker_id=self._broker_id, broker_epoch=self._epoch(), directories=[
            Request.DirectoryData(id=d, topics=[Request.TopicData(topic_id=t, partitions=[
                Request.PartitionData(partition_index=i) for i in indexes]) for t, indexes in topics.items()])
            for d, topics in by_dir.items()])
        try:
            response = await self._call(request, ASSIGN_VERSION)
        except KafkaError as exc:
            log.info("AssignReplicasToDirs: %s; retrying", exc)
            return False
        assert isinstance(response, AssignReplicasToDirsResponse)
        if response.error_code != ErrorCode.NONE:
            log.info("AssignReplicasToDirs: %s; retrying", ErrorCode(response.error_code).name)
            return False
        for answered in response.directories:
            for topic in answered.topics:
                for part in topic.partitions:
                    if part.error_code != ErrorCode.NONE:
                        log.warning("AssignReplicasToDirs: partition %d of topic id %s in dir %s: %s",
                                    part.partition_index, topic.topic_id, answered.id,
                                    ErrorCode(part.error_code).name)
        return True
