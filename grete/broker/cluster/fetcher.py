"""Followers fetching from their leaders (Kafka's ReplicaFetcherManager / ReplicaFetcherThread):
one fetcher per leader broker, each a task that long-polls the leader with Fetch as a replica
(replica id = this broker) for every partition it follows there, and appends what comes back as is.

Truncation follows KIP-320's truncate-on-fetch: each fetch names the epoch of the last batch this
replica holds; a leader whose log went elsewhere after that epoch answers with a diverging epoch,
and the follower cuts its log back to where the two agree, then fetches again.

Each fetcher keeps a fetch session with its leader (fetcher_session.py, as Kafka's fetchers do):
after the first full fetch, a fetch names only the partitions whose fetch position moved, and the
answer only the partitions with news, so an idle follower's fetches carry no partitions.

With the direct path's replication push (``direct.replication.enable``, docs/direct.md) a partition
whose fetch came back clean (no error, no diverging epoch) is registered with its leader, which then
pushes its appends from this replica's log end on; the
fetcher leaves it out of its fetches until a push fails or the partition is followed anew, and
fetching (with its truncation) takes over again.

Replication throttles (KIP-73, the follower's side): while the broker's follower quota is exceeded,
partitions its topic configs throttle here and that have not caught up are left out of the fetches
(grete/broker/quotas/replication_quotas.py).
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grete.broker.cluster.fetcher_session import FollowerSession
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.config import BrokerConfig
from grete.broker.direct.base import PushReceiver
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.quotas.replication_quotas import ReplicationQuota
from grete.broker.replica.partition import Partition, fetch_position_of
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from grete.storage import KafkaStorageException

if TYPE_CHECKING:
    from grete.broker.broker import Broker

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # replica id in the body, last fetched epoch and diverging epochs (KIP-320)
LIST_OFFSETS_VERSION = 7
SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
EARLIEST, LATEST = -2, -1
PartitionKey = tuple[str, int]
PushSource = Callable[[], PushReceiver | None]


@dataclass
class _Followed:
    partition: Partition
    delayed_until: float = 0.0  # after an error: not fetched again before this (monotonic) time
    in_sync: bool = False  # its last fetch brought it to the leader's high watermark (Kafka's lag <= 0)


@dataclass
class ReplicaFetcher:
    leader_id: int
    host: str
    port: int
    broker_id: int
    config: BrokerConfig
    metrics: BrokerMetrics
    push: PushSource
    quota: ReplicationQuota | None = None  # replication throttles (KIP-73), the follower's side
    partitions: dict[PartitionKey, _Followed] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    session: FollowerSession = field(default_factory=FollowerSession)

    def start(self) -> None:
        self.peer = PeerConnection(self.host, self.port, f"replica-fetcher-{self.broker_id}-{self.leader_id}",
                                   timeout_s=self.config.get_int("replica.socket.timeout.ms") / 1000)
        self.task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.peer.close()

    def add(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = _Followed(partition)
        self._wake.set()

    def remove(self, key: PartitionKey) -> None:
        self.partitions.pop(key, None)
        receiver = self.push()
        if receiver is not None:
            receiver.drop(key)

    async def _run(self) -> None:
        backoff_s = self.config.get_int("replica.fetch.backoff.ms") / 1000
        while True:
            now = time.monotonic()
            receiver = self.push()
            ready = {k: f for k, f in self.partitions.items()
                     if f.delayed_until <= now and f.partition.online and not f.partition.is_leader
                     and (receiver is None or not receiver.pushed(k))}
            for key in self._held_back(ready):
                del ready[key]
            if not ready:
                self._wake.clear()
                try:
                    async with asyncio.timeout(backoff_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            try:
                response = await self.peer.call(self._request(ready), FETCH_VERSION)
            except PeerError as exc:
                self.session.failed(None)
                log.info("fetching from broker %d failed: %s", self.leader_id, exc)
                await asyncio.sleep(backoff_s)
                continue
            if response.error_code != 0:
                self.session.failed(ErrorCode(response.error_code))
                if response.error_code in SESSION_ERRORS:
                    continue  # the next fetch is full and opens a new session: nothing to wait for
                log.info("broker %d refused the fetch: %s", self.leader_id, ErrorCode(response.error_code).name)
                await asyncio.sleep(backoff_s)
                continue
            self.session.answered(response.session_id)
            clean: list[Partition] = []
            for topic in response.responses:
                for data in topic.partitions:
                    followed = ready.get((topic.topic, data.partition_index))
                    if followed is not None and self.partitions.get((topic.topic, data.partition_index)) is followed:
                        if await self._process(followed, data, backoff_s):
                            clean.append(followed.partition)
            receiver = self.push()
            if receiver is not None:
                await self._register_push(receiver, clean)

    def _held_back(self, ready: dict[PartitionKey, _Followed]) -> list[PartitionKey]:
        """Throttled partitions not in sync, while the follower's replication quota is exceeded
        (Kafka's shouldFollowerThrottle); with nothing else to fetch the fetcher waits its backoff."""
        quota = self.quota
        if quota is None:
            return []
        held = [key for key, followed in ready.items() if not followed.in_sync and quota.throttled(*key)]
        return held if held and quota.exceeded() else []

    async def _register_push(self, receiver: PushReceiver, clean: list[Partition]) -> None:
        """Partitions whose fetch came back clean are pushed from now on, from their log end (not
        waiting for an empty fetch: under steady appends a fetch never comes back empty). Registered
        between fetches: no fetch of them is in flight, so fetch and push never both append."""
        wanted = [p for p in clean if (p.topic, p.index) in self.partitions and receiver.eligible(p)]
        if wanted:
            await receiver.register(self.leader_id, self.peer, self.broker_id, wanted, self._wake.set)

    def _request(self, ready: dict[PartitionKey, _Followed]) -> FetchRequest:
        max_bytes = self.config.get_int("replica.fetch.max.bytes")
        wanted = dict(zip(ready, map(fetch_position_of, map(_partition_of, ready.values())), strict=True))
        send, forget = self.session.select(wanted, max_bytes)
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for key in sorted(send):
            leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset = wanted[key]
            by_topic.setdefault(key[0], []).append(FetchRequest.FetchPartition(
                partition=key[1], current_leader_epoch=leader_epoch, fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch, log_start_offset=log_start_offset,
                partition_max_bytes=max_bytes))
        forgotten: dict[str, list[int]] = {}
        for topic, index in sorted(forget):
            forgotten.setdefault(topic, []).append(index)
        return FetchRequest(
            replica_id=self.broker_id, max_wait_ms=self.config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=self.config.get_int("replica.fetch.min.bytes"),
            max_bytes=self.config.get_int("replica.fetch.response.max.bytes"), isolation_level=0,
            session_id=self.session.session_id, session_epoch=self.session.epoch,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()])

    async def _process(self, followed: _Followed, data: FetchResponse.PartitionData, backoff_s: float) -> bool:
        """Apply one partition's fetch answer; True if it came back clean (appended, nothing to
        truncate): the log agrees with the leader's up to its end, so pushes may start there."""
        partition = followed.partition
        if partition.is_leader or not partition.online:
            return False
        try:
            if data.error_code == ErrorCode.NONE:
                diverging = data.diverging_epoch
                if diverging.epoch >= 0:
                    self._truncate_to_leader(partition, diverging.epoch, diverging.end_offset)
                    return False
                records = data.records if isinstance(data.records, bytes | bytearray | memoryview) else b""
                self.metrics.replica_fetch_bytes += len(records)
                partition.follower_append(records, data.high_watermark, data.log_start_offset, _now_ms())
                followed.in_sync = partition.log_end_offset >= data.high_watermark
                if self.quota is not None and records and self.quota.throttled(partition.topic, partition.index):
                    self.quota.record(len(records))
                return True
            elif data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                log.info("%s-%d: fetch offset %d out of range on broker %d", partition.topic, partition.index,
                         partition.log_end_offset, self.leader_id)
                await self._reset_out_of_range(partition)
            else:
                # FENCED/UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER...: the next LeaderAndIsr settles it.
                followed.delayed_until = time.monotonic() + backoff_s
        except (KafkaError, KafkaStorageException, ValueError) as exc:
            log.error("replicating %s-%d from broker %d failed: %s", partition.topic, partition.index,
                      self.leader_id, exc)
            followed.delayed_until = time.monotonic() + backoff_s
        return False

    def _truncate_to_leader(self, partition: Partition, leader_epoch: int, leader_end_offset: int) -> None:
        """KIP-279: cut the log where it and the leader's agree: the leader's end of ``leader_epoch``
        if this replica has that epoch too, else the end of the largest epoch below it here (and the
        next fetch narrows it further)."""
        epoch, end = partition.end_offset_for_epoch(leader_epoch)
        target = min(leader_end_offset, end) if epoch == leader_epoch else end
        if epoch < 0 or end < 0:
            target = min(leader_end_offset, partition.high_watermark)
        target = min(target, partition.log_end_offset)
        log.info("truncating %s-%d to %d (leader's epoch %d ends at %d)", partition.topic, partition.index,
                 target, leader_epoch, leader_end_offset)
        partition.truncate_to(max(target, 0))

    async def _reset_out_of_range(self, partition: Partition) -> None:
        """The leader has not got our fetch offset: past its end (an unclean election) we cut back to
        it; below its start we start over at its start (Kafka's handleOutOfRangeError)."""
        latest = await self._leader_offset(partition, LATEST)
        if latest is not None and partition.log_end_offset > latest:
            log.info("%s-%d: cutting back to the leader's log end %d (from %d)", partition.topic, partition.index,
                     latest, partition.log_end_offset)
            partition.truncate_to(latest)
            return
        earliest = await self._leader_offset(partition, EARLIEST)
        if earliest is not None:
            log.info("%s-%d: starting over at the leader's log start %d", partition.topic, partition.index, earliest)
            partition.truncate_fully_and_start_at(earliest)

    async def _leader_offset(self, partition: Partition, timestamp: int) -> int | None:
        request = ListOffsetsRequest(replica_id=self.broker_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=partition.topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=partition.index,
                                                        current_leader_epoch=partition.leader_epoch,
                                                        timestamp=timestamp)])])
        try:
            response: ListOffsetsResponse = await self.peer.call(request, LIST_OFFSETS_VERSION)
        except PeerError:
            return None
        answer = response.topics[0].partitions[0]
        return int(answer.offset) if answer.error_code == 0 else None


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions of."""

    def __init__(self, broker_id: int, config: BrokerConfig, metrics: BrokerMetrics | None = None,
                 push: PushSource | None = None, quota: ReplicationQuota | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.quota = quota
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self.push: PushSource = push if push is not None else _no_push
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    def follow(self, partition: Partition, leader_id: int, endpoint: tuple[str, int] | None) -> None:
        key = (partition.topic, partition.index)
        self.unfollow(key)
        if endpoint is None:
            log.warning("%s-%d: leader %d is not live; not fetching", partition.topic, partition.index, leader_id)
            return
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None or (fetcher.host, fetcher.port) != endpoint:
            if fetcher is not None:
                fetcher.stop()
            fetcher = ReplicaFetcher(leader_id, endpoint[0], endpoint[1], self.broker_id, self.config,
                                     self.metrics, self.push, self.quota)
            fetcher.start()
            self._fetchers[leader_id] = fetcher
        fetcher.add(partition)
        self._leader_of[key] = leader_id

    def unfollow(self, key: PartitionKey) -> None:
        leader_id = self._leader_of.pop(key, None)
        fetcher = self._fetchers.get(leader_id) if leader_id is not None else None
        if fetcher is not None:
            fetcher.remove(key)
            if not fetcher.partitions:
                fetcher.stop()
                del self._fetchers[fetcher.leader_id]

    def shutdown(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.stop()
        self._fetchers.clear()
        self._leader_of.clear()


_partition_of = operator.attrgetter("partition")


def replication_quota(broker_id: int, broker: Broker, side: str) -> ReplicationQuota:
    """A replication throttle of ``broker`` ("leader": its answers to followers; "follower": its
    fetchers), reading its topics' configs as they are."""
    def configs(topic: str) -> dict[str, str] | None:
        meta = broker.metadata.topic(topic)
        return meta.configs if meta is not None else None
    return ReplicationQuota(broker_id, broker.config, configs, side)


def _no_push() -> PushReceiver | None:
    return None


def _now_ms() -> int:
    return int(time.time() * 1000)


