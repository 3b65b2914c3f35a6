"""Share-group contracts on the wire, against the reference Kafka 4.3.1 and grete: a closing member's
final ShareAcknowledge, sent with its leaving heartbeat, is applied (the share session lives on the
partition's leader, which never hears of membership); ShareFetch's MaxBytes 0 and MaxRecords 0
acquire nothing; MaxRecords and BatchSize shape what is acquired as Kafka's SharePartition.acquire
does; a record whose acquisition lock timed out comes back with delivery count 2; an
AlterShareGroupOffsets that is a fresh broker's first use of ``__share_group_state`` (while other
share groups create it) succeeds once its coordinator is ready, never NOT_COORDINATOR per partition.
The last two run on a broker of their own (a short lock; a state topic not yet created)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from wire_share_helpers import RETRY, call, describe_offsets, heartbeat, join

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import cluster
from grete.testing.process import broker_process
from grete.testing.routed_wire import open_wire
from tools import kafka_dist
from tools.kafka_admin import create_topic
from tools.reference_kafka import ReferenceKafka

F, B, A = ShareFetchRequest, ShareAcknowledgeRequest, AlterShareGroupOffsetsRequest
ACCEPT = 1
RECORD_LIMIT = 1
SHORT_LOCK = {"group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "2000"}
Acquired = list[tuple[int, int, int]]


@pytest.fixture
def bootstrap(broker: Any, target: str) -> str:
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")
    return str(broker.bootstrap)


@contextmanager
def own_broker(target: str, overrides: dict[str, str]) -> Iterator[str]:
    """A broker of the target of its own (a cluster of its own for a cluster target), started with
    ``overrides``; its bootstrap."""
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")
    if target == "grete":
        with broker_process(overrides) as running:
            yield running.bootstrap_servers
        return
    if target == "grete-kraft":
        with cluster(3, controllers=1, overrides=overrides) as nodes:
            yield nodes.bootstrap_servers
        return
    version = target.removeprefix("kafka-")
    kafka_dist.fetch(version)
    with ReferenceKafka(version, overrides=overrides) as ref:
        yield ref.bootstrap


def wire_to(bootstrap: str) -> Wire:
    return open_wire(bootstrap)


class Member:
    """A share-group member with its own connection and share session on partition 0 of a topic."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.wire, self.group = wire_to(bootstrap), group
        call(self.wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
             lambda r: r.coordinators[0].error_code)
        self.id, self.topic_id, self.epoch = join(self.wire, group, topic)
        self.session_epoch = 0

    def request(self, *, max_bytes: int = 1 << 20, max_records: int = 500, batch_size: int = 500,
                wait_ms: int = 1000, acks: list[Any] | None = None, version: int = 1,
                record_limit: bool = False) -> ShareFetchRequest:
        """The next ShareFetch of the session (the partition named when it opens or acknowledges)."""
        partitions = [F.FetchPartition(partition_index=0, acknowledgement_batches=acks or [])]
        request = F(group_id=self.group, member_id=self.id, share_session_epoch=self.session_epoch,
                    max_wait_ms=wait_ms, min_bytes=1, max_bytes=max_bytes, max_records=max_records,
                    batch_size=batch_size, topics=[F.FetchTopic(topic_id=self.topic_id, partitions=partitions)]
                    if self.session_epoch == 0 or acks else [])
        if version >= 2:
            request.share_acquire_mode = RECORD_LIMIT if record_limit else 0
        return request

    def fetch(self, version: int = 1, **kw: Any) -> ShareFetchResponse:
        response: ShareFetchResponse = self.wire.call(self.request(version=version, **kw), ShareFetchResponse, version)
        assert response.error_code == 0, response.error_message
        self.session_epoch += 1
        return response

    def first_fetch(self, **kw: Any) -> Acquired:
        """Open the session, asking again while the leader initializes the share partition."""
        deadline = time.monotonic() + 20
        while True:
            got = acquired(self.fetch(**kw))
            if got or time.monotonic() > deadline:
                return got
            self.session_epoch = 0

    def close(self) -> None:
        self.wire.close()


def acquired(response: ShareFetchResponse) -> Acquired:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def accept(first: int, last: int) -> Any:
    return B.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[ACCEPT])


def share_group(bootstrap: str) -> str:
    """A new share group that starts at the earliest offset."""
    group = f"sgk-{uuid.uuid4().hex[:8]}"
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until answered
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    return group


def new_topic(bootstrap: str) -> str:
    name = f"sgk-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, 1, None)
    return name


def produce(bootstrap: str, topic: str, batches: int, per_batch: int = 1) -> None:
    """``batches`` batches of ``per_batch`` records each on partition 0 (one flush per batch)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    for b in range(batches):
        for i in range(per_batch):
            producer.produce(topic, f"r{b}-{i}".encode(), partition=0)
        producer.flush(30)


@pytest.fixture
def scenario(bootstrap: str) -> Callable[..., tuple[str, str]]:
    """``scenario(batches, per_batch) -> (group, topic)``: a topic holding the records, a group at earliest."""
    def make(batches: int, per_batch: int = 1) -> tuple[str, str]:
        topic = new_topic(bootstrap)
        produce(bootstrap, topic, batches, per_batch)
        return share_group(bootstrap), topic

    return make


def test_final_acknowledge_sent_with_the_leaving_heartbeat_is_applied(bootstrap: str, scenario: Any) -> None:
    """A consumer closing: its leaving ShareGroupHeartbeat and its final ShareAcknowledge pipelined on
    one connection, the heartbeat first. The acknowledgement is applied: the next member gets only
    the record produced after."""
    group, topic = scenario(1, 3)
    a = Member(bootstrap, group, topic)
    assert a.first_fetch() == [(0, 2, 1)]
    a.wire.send(ShareGroupHeartbeatRequest(group_id=group, member_id=a.id, member_epoch=-1), 1)
    a.wire.send(B(group_id=group, member_id=a.id, share_session_epoch=-1, topics=[B.AcknowledgeTopic(
        topic_id=a.topic_id, partitions=[B.AcknowledgePartition(partition_index=0,
                                                                acknowledgement_batches=[accept(0, 2)])])]), 1)
    left = a.wire.receive(ShareGroupHeartbeatResponse, 1)
    acked = a.wire.receive(ShareAcknowledgeResponse, 1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert acked.error_code == 0, acked.error_message
    assert [(p.partition_index, p.error_code) for t in acked.responses for p in t.partitions] == [(0, 0)]
    b = Member(bootstrap, group, topic)
    produce(bootstrap, topic, 1)
    assert b.first_fetch(wait_ms=2000) == [(3, 3, 1)]
    assert heartbeat(b.wire, group, b.id, -1, topic).error_code == 0
    a.close()
    b.close()


def test_max_bytes_or_max_records_zero_acquires_nothing(bootstrap: str, scenario: Any) -> None:
    """MaxBytes 0 (or MaxRecords 0): no partition in the answer (only acknowledgements' rows), nothing
    acquired, and no wait; the records stay for the next fetch."""
    group, topic = scenario(1, 3)
    m = Member(bootstrap, group, topic)
    assert m.first_fetch() == [(0, 2, 1)]
    produce(bootstrap, topic, 1)
    started = time.monotonic()
    with_ack = m.fetch(max_bytes=0, wait_ms=5000, acks=[F.AcknowledgementBatch(
        first_offset=0, last_offset=2, acknowledge_types=[ACCEPT])])
    assert [(p.partition_index, p.error_code, p.acknowledge_error_code, p.acquired_records)
            for t in with_ack.responses for p in t.partitions] == [(0, 0, 0, [])]
    assert m.fetch(max_bytes=0, wait_ms=5000).responses == []
    assert m.fetch(max_records=0, wait_ms=5000).responses == []
    assert time.monotonic() - started < 4  # answered at once, not after MaxWaitMs
    assert acquired(m.fetch()) == [(3, 3, 1)]
    assert heartbeat(m.wire, group, m.id, -1, topic).error_code == 0
    m.close()


@pytest.mark.parametrize("batches,per_batch,max_records,batch_size,expected", [
    # whole batches until MaxRecords is reached (a soft limit), in ranges of at least BatchSize records
    (10, 5, 7, 500, [(0, 9, 1)]),
    (10, 5, 7, 2, [(0, 4, 1), (5, 9, 1)]),
    (10, 5, 500, 7, [(0, 9, 1), (10, 19, 1), (20, 29, 1), (30, 39, 1), (40, 49, 1)]),
    (10, 1, 7, 3, [(0, 2, 1), (3, 5, 1), (6, 6, 1)]),
    (2, 20, 7, 3, [(0, 19, 1)]),
])
def test_max_records_and_batch_size(bootstrap: str, scenario: Any, batches: int, per_batch: int,
                                    max_records: int, batch_size: int, expected: Acquired) -> None:
    group, topic = scenario(batches, per_batch)
    m = Member(bootstrap, group, topic)
    assert m.first_fetch(max_records=max_records, batch_size=batch_size) == expected
    m.close()


def test_redelivery_and_new_records_share_max_records(bootstrap: str, scenario: Any) -> None:
    """A released record comes back first and the rest of MaxRecords is filled with new records, in
    the same answer; record_limit (ShareFetch v2) takes exactly MaxRecords, answered as one range."""
    group, topic = scenario(10)
    m = Member(bootstrap, group, topic)
    assert m.first_fetch(max_records=3, batch_size=3) == [(0, 2, 1)]
    acked = m.wire.call(B(group_id=group, member_id=m.id, share_session_epoch=m.session_epoch, topics=[
        B.AcknowledgeTopic(topic_id=m.topic_id, partitions=[B.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            B.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[2]), accept(1, 2)])])]),
        ShareAcknowledgeResponse, 1)
    assert acked.error_code == 0 and acked.responses[0].partitions[0].error_code == 0
    m.session_epoch += 1
    assert acquired(m.fetch(max_records=3, batch_size=3)) == [(0, 0, 2), (3, 4, 1)]
    assert acquired(m.fetch(version=2, max_records=4, batch_size=2, record_limit=True)) == [(5, 8, 1)]
    m.close()


def test_a_timed_out_acquisition_lock_delivers_again(target: str) -> None:
    """group.share.record.lock.duration.ms 2 s: a record acquired and never acknowledged is acquired
    again, delivery count 2, by a fetch parked on it, once the lock times out (and not before)."""
    with own_broker(target, SHORT_LOCK) as bootstrap:
        topic = new_topic(bootstrap)
        produce(bootstrap, topic, 1)
        group = share_group(bootstrap)
        a, b = Member(bootstrap, group, topic), Member(bootstrap, group, topic)
        first = a.first_fetch()
        assert first == [(0, 0, 1)]
        started = time.monotonic()
        assert acquired(b.fetch(wait_ms=8000)) == [(0, 0, 2)]
        assert 1.0 < time.monotonic() - started < 7.5
        assert acquired(a.fetch(wait_ms=0)) == []  # a's lock is gone: nothing for it now
        a.close()
        b.close()


def test_alter_offsets_while_the_state_topic_is_created(target: str) -> None:
    """A fresh broker: an AlterShareGroupOffsets is the first use of ``__share_group_state`` while
    share groups make their first fetches (creating it too). The Alter is answered with the group
    coordinator's retriable codes at most, then applied (never NOT_COORDINATOR per partition)."""
    with own_broker(target, {}) as bootstrap:
        topic = new_topic(bootstrap)
        produce(bootstrap, topic, 3)
        wire = wire_to(bootstrap)
        group = f"sgk-alter-{uuid.uuid4().hex[:8]}"
        call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
             lambda r: r.coordinators[0].error_code)
        member, _, _ = join(wire, group, topic)  # the group exists, empty: the Alter goes straight to the state
        assert heartbeat(wire, group, member, -1, topic).error_code == 0
        others = [Member(bootstrap, share_group(bootstrap), topic) for _ in range(2)]
        alter = A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
            A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=1)])])
        wire.send(alter, 0)
        for m in others:  # their first share fetches, in flight with the Alter
            m.wire.send(m.request(wait_ms=2000), 1)
        altered = wire.receive(AlterShareGroupOffsetsResponse, 0)
        if altered.error_code in RETRY:  # the group's coordinator not ready yet: asked again, as admin clients do
            altered = call(wire, alter, AlterShareGroupOffsetsResponse, 0, lambda r: r.error_code)
        assert altered.error_code == 0, altered.error_message
        assert [(p.partition_index, p.error_code) for t in altered.responses for p in t.partitions] == [
            (0, ErrorCode.NONE)]
        assert describe_offsets(wire, group, topic) == (0, 1)
        for m in others:
            assert m.wire.receive(ShareFetchResponse, 1).error_code == 0
            m.close()
        wire.close()
