"""Describe/Alter/DeleteShareGroupOffsets on the wire, against the reference Kafka 4.3.1 and grete:
a share partition never fetched describes as start offset -1, Alter sets it on an empty group,
Alter and Delete on a group with members are NON_EMPTY_GROUP, Delete forgets it,
Delete of an unknown group is GROUP_ID_NOT_FOUND. Also: DescribeShareGroupOffsets v1's lag,
FindCoordinator v6's SHARE keys, and the classic/consumer APIs refusing a share group's id."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from wire_share_helpers import call, heartbeat, join
from wire_share_helpers import describe_offsets as describe

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from grete.storage.files import uuid_to_kafka
from grete.testing._wire import Wire
from grete.testing.routed_wire import open_wire

A, D, X = AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest


@pytest.fixture
def wire(broker: Any, target: str) -> Any:
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")
    w = open_wire(broker.bootstrap)
    yield w
    w.close()


def alter(wire: Wire, group: str, topic: str, offset: int) -> Any:
    return call(wire, A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
        A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset)])]),
        AlterShareGroupOffsetsResponse, 0, lambda r: r.error_code)


def delete(wire: Wire, group: str, topic: str) -> Any:
    return call(wire, X(group_id=group, topics=[X.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]),
                DeleteShareGroupOffsetsResponse, 0, lambda r: r.error_code)


def acquire(wire: Wire, group: str, member: str, topic_id: Any) -> list[tuple[int, int, int]]:
    fetched = wire.call(ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=0, max_wait_ms=1000,
                                          min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                                              ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                                  ShareFetchRequest.FetchPartition(partition_index=0)])]),
                        ShareFetchResponse, 1)
    assert fetched.error_code == 0, fetched.error_message
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in fetched.responses for p in t.partitions for a in p.acquired_records]


def test_share_group_offsets(wire: Wire, broker: Any, make_topic: Any) -> None:
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(3):
        producer.produce(topic, f"o{i}".encode(), partition=0)
    producer.flush(30)
    group = f"sgo-{uuid.uuid4().hex[:8]}"
    # As clients do first: FindCoordinator (Kafka creates __consumer_offsets on it).
    found = call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
                 lambda r: r.coordinators[0].error_code)
    assert found.coordinators[0].error_code == 0
    assert describe(wire, group, topic) == (0, -1)
    member, topic_id, epoch = join(wire, group, topic)
    assert acquire(wire, group, member, topic_id) == []  # share.auto.offset.reset latest: starts at 3
    assert alter(wire, group, topic, 0).error_code == ErrorCode.NON_EMPTY_GROUP
    assert delete(wire, group, topic).error_code == ErrorCode.NON_EMPTY_GROUP
    assert heartbeat(wire, group, member, -1, topic).error_code == 0
    altered = alter(wire, group, topic, 2)
    assert altered.error_code == 0 and altered.responses[0].partitions[0].error_code == 0
    assert describe(wire, group, topic) == (0, 2)
    # (grete's next ShareFetch then starts at 2; Kafka 4.3.1 delivered nothing within 15 s in this
    # sequence, its broker holding the share partition it had cached: not compared here.)
    member, topic_id, epoch = join(wire, group, topic)
    assert heartbeat(wire, group, member, -1, topic).error_code == 0
    deleted = call(wire, X(group_id=group, topics=[X.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),
                                                   X.DeleteShareGroupOffsetsRequestTopic(topic_name="no-such-topic")]),
                   DeleteShareGroupOffsetsResponse, 0, lambda r: r.error_code)
    assert deleted.error_code == 0
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        (topic, 0), ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert describe(wire, group, topic) == (0, -1)
    assert delete(wire, f"none-{uuid.uuid4().hex[:8]}", topic).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_share_heartbeat_and_session_errors(wire: Wire, broker: Any, make_topic: Any) -> None:
    """The error codes of ShareGroupHeartbeat and of share sessions, as Kafka 4.3.1 answers them."""
    topic = make_topic(partitions=1)
    group = f"sge-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    assert heartbeat(wire, group, "", 0, topic).error_code == ErrorCode.INVALID_REQUEST
    member, topic_id, epoch = join(wire, group, topic)
    assert heartbeat(wire, group, member, epoch + 7, topic).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert heartbeat(wire, group, uuid.uuid4().hex[:22], 3, topic).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    def share_fetch(epoch: int, acks: bool) -> Any:
        batches = [ShareFetchRequest.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])]
        return wire.call(ShareFetchRequest(
            group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
            max_bytes=1 << 20, max_records=500, batch_size=500, topics=[ShareFetchRequest.FetchTopic(
                topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition(
                    partition_index=0, acknowledgement_batches=batches if acks else [])])]), ShareFetchResponse, 1)

    assert share_fetch(5, False).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert share_fetch(0, True).error_code == ErrorCode.INVALID_REQUEST
    assert share_fetch(0, False).error_code == 0
    assert share_fetch(5, False).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert share_fetch(1, False).error_code == 0
    left = heartbeat(wire, group, member, -1, topic)
    assert (left.error_code, left.member_epoch) == (0, -1)


def test_an_id_held_by_a_classic_group_is_not_a_share_group(wire: Wire, make_topic: Any) -> None:
    topic = make_topic(partitions=1)
    group = f"sgc-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    committed = call(wire, OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                               topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                                                   OffsetCommitRequest.OffsetCommitRequestPartition(
                                                       partition_index=0, committed_offset=0)])]),
                     OffsetCommitResponse, 8, lambda r: r.topics[0].partitions[0].error_code)
    assert committed.topics[0].partitions[0].error_code == 0
    refused = heartbeat(wire, group, uuid.uuid4().hex[:22], 0, topic)
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert refused.error_message == f"Group {group} is not a share group."


def test_disconnect_releases_acquired_records(wire: Wire, broker: Any, make_topic: Any) -> None:
    """A member whose connection closes while it holds records: another member gets them well before
    the 30 s acquisition lock would end."""
    topic = make_topic(partitions=1)
    group = f"sgd-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    doomed = open_wire(broker.bootstrap)
    a, topic_id, _ = join(doomed, group, topic)
    b, _, _ = join(wire, group, topic)
    assert acquire(doomed, group, a, topic_id) == []  # latest: the share partition starts now
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(3):
        producer.produce(topic, f"d{i}".encode(), partition=0)
    producer.flush(30)
    held: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:
        held = acquire(doomed, group, a, topic_id)
    assert held == [(0, 2, 1)]
    doomed.close()
    started = time.monotonic()
    got: list[tuple[int, int, int]] = []
    while not got and time.monotonic() - started < 20:
        got = acquire(wire, group, b, topic_id)
    assert got == [(0, 2, 2)] and time.monotonic() - started < 20


def settle(wire: Wire, group: str, topic: str, members: dict[str, int], rounds: int = 12) -> dict[str, list[int]]:
    """Heartbeat every member until two rounds in a row change nothing; each one's partitions."""
    owned: dict[str, list[int]] = {m: [] for m in members}
    quiet = 0
    for _ in range(rounds * 4):
        changed = False
        for m, epoch in list(members.items()):
            hb = heartbeat(wire, group, m, epoch, topic)
            assert hb.error_code == 0, hb.error_message
            members[m] = hb.member_epoch
            if hb.assignment is not None:
                parts = sorted(p for tp in hb.assignment.topic_partitions for p in tp.partitions)
                changed |= parts != owned[m]
                owned[m] = parts
        quiet = 0 if changed or not all(owned.values()) else quiet + 1
        if quiet >= 2:
            break
        time.sleep(0.5)
    return owned


@pytest.mark.parametrize("members,partitions", [(2, 4), (3, 2)])
def test_simple_assignor_spreads(wire: Wire, make_topic: Any, members: int, partitions: int) -> None:
    topic = make_topic(partitions=partitions)
    group = f"sga-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    ids = {uuid.uuid4().hex[:22]: 0 for _ in range(members)}
    owned = settle(wire, group, topic, ids)
    counts = sorted(len(p) for p in owned.values())
    assert set().union(*map(set, owned.values())) == set(range(partitions))
    if members <= partitions:
        assert counts[-1] - counts[0] <= 1 and sum(counts) == partitions  # each partition once, balanced
    else:  # more members than partitions: each partition shared by ceil(members / partitions) members
        per = -(-members // partitions)
        assert [sum(p in parts for parts in owned.values()) for p in range(partitions)] == [per] * partitions
        assert counts[-1] - counts[0] <= 1


def test_share_group_describe(wire: Wire, make_topic: Any) -> None:
    topic = make_topic(partitions=2)
    group = f"sgd-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    ids = {uuid.uuid4().hex[:22]: 0 for _ in range(2)}
    owned = settle(wire, group, topic, ids)

    def describe_group(name: str) -> Any:
        r = wire.call(ShareGroupDescribeRequest(group_ids=[name], include_authorized_operations=False),
                      ShareGroupDescribeResponse, 1)
        return r.groups[0]

    g = describe_group(group)
    assert (g.error_code, g.group_state, g.assignor_name) == (0, "Stable", "simple")
    # ListGroups v5 lists it as a share group, and not under the classic or consumer types.
    listed = {t: {(x.group_id, x.protocol_type, x.group_state, x.group_type)
                  for x in wire.call(ListGroupsRequest(states_filter=[], types_filter=[t]), ListGroupsResponse, 5).groups}
              for t in ("share", "classic", "consumer")}
    assert (group, "share", "Stable", "share") in listed["share"]
    assert all(x[0] != group for x in listed["classic"] | listed["consumer"])
    assert g.group_epoch == g.assignment_epoch > 0
    assert {m.member_id: sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)
            for m in g.members} == owned
    assert all(m.subscribed_topic_names == [topic] and m.member_epoch == g.group_epoch for m in g.members)
    assert {tp.topic_name for m in g.members for tp in m.assignment.topic_partitions} == {topic}
    def delete_group() -> int:
        code: int = wire.call(DeleteGroupsRequest(groups_names=[group]), DeleteGroupsResponse, 2).results[0].error_code
        return code
    assert delete_group() == ErrorCode.NON_EMPTY_GROUP
    for m in ids:
        assert heartbeat(wire, group, m, -1, topic).error_code == 0
    empty = describe_group(group)
    assert (empty.error_code, empty.group_state, empty.members) == (0, "Empty", [])
    assert delete_group() == 0
    assert describe_group(group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    missing = describe_group(f"none-{uuid.uuid4().hex[:8]}")
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def find_coordinators(wire: Wire, version: int, key_type: int, keys: list[str]) -> list[tuple[int, str | None, int]]:
    r = call(wire, FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys), FindCoordinatorResponse, version,
             lambda r: r.coordinators[0].error_code)
    assert [c.key for c in r.coordinators] == keys
    return [(c.error_code, c.error_message, c.node_id) for c in r.coordinators]


def test_find_coordinator_v6_share_keys(wire: Wire, broker: Any, make_topic: Any) -> None:
    """Key type SHARE names the share coordinator of "groupId:topicId:partition" (batched keys); a key
    not of that form, or SHARE below v6, is INVALID_REQUEST with an empty message."""
    topic = make_topic(partitions=1)
    group = f"sfc-{uuid.uuid4().hex[:8]}"
    ((code, _, group_node),) = find_coordinators(wire, 6, 0, [group])
    assert code == 0 and group_node >= 0
    member, topic_id, _ = join(wire, group, topic)
    keys = [f"{group}:{uuid_to_kafka(topic_id)}:{i}" for i in (0, 1)]
    found = find_coordinators(wire, 6, 2, keys)
    assert [(code, message) for code, message, _ in found] == [(0, "")] * 2
    first, second = (node for *_, node in found)
    assert first >= 0 and second >= 0
    if broker.nodes == 1:
        assert first == second == group_node  # one broker: it is every coordinator
    r = wire.call(FindCoordinatorRequest(key_type=2, coordinator_keys=keys[:1]), FindCoordinatorResponse, 6)
    assert r.coordinators[0].port > 0 and r.coordinators[0].host
    text = uuid_to_kafka(topic_id)
    # read as Java reads them: trailing empty parts dropped, a signed partition, the group trimmed
    odd = [f"{group}:{text}:-1", f"{group}:{text}:0::", f"{group}:{text}:+1", f"{group}:AAAAAAAAAAAAAAAAAAAAAA:0"]
    read = [(c, n) for c, _, n in find_coordinators(wire, 6, 2, odd)]
    assert [c for c, _ in read] == [0] * len(odd) and all(n >= 0 for _, n in read)
    assert (read[1][1], read[2][1]) == (first, second)  # partition 0 and 1 again
    if broker.nodes == 1:
        assert {n for _, n in read} == {group_node}
    bad = ["nonsense", f"{group}:{text}", f"{group}:zz:0", f"{group}:{text}:x", "", f" :{text}:0",
           f"{group}:{text}: 1", f"{group}:{text[:-1]}:0"]
    assert find_coordinators(wire, 6, 2, bad) == [(ErrorCode.INVALID_REQUEST, "", -1)] * len(bad)
    assert find_coordinators(wire, 5, 2, keys[:1]) == [(ErrorCode.INVALID_REQUEST, "", -1)]
    ((code, message, node),) = find_coordinators(wire, 6, 3, keys[:1])
    assert (code, node) == (ErrorCode.INVALID_REQUEST, -1) and message and "malformed" in message
    assert heartbeat(wire, group, member, -1, topic).error_code == 0


def test_describe_share_group_offsets_v1_lag(wire: Wire, broker: Any, make_topic: Any) -> None:
    """v1's lag (KIP-1226): -1 without state; after 5 records, 0-1 accepted, 2 released, 3 rejected and
    4 still acquired: 2 (the log end, less the SPSO, less the records whose delivery is complete)."""
    versions = {k.api_key: (k.min_version, k.max_version) for k in wire.call(
        ApiVersionsRequest(client_software_name="t", client_software_version="1"), ApiVersionsResponse, 3).api_keys}
    assert versions[90] == (0, 1)
    # FindCoordinator with SHARE keys, and the share coordinator's inter-broker APIs (KIP-932, KIP-1226)
    assert [versions[k] for k in (10, 83, 84, 85, 86, 87)] == [(0, 6), (0, 0), (0, 0), (0, 1), (0, 0), (0, 1)]
    topic = make_topic(partitions=1)
    group = f"sgl-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)

    def describe_v1() -> tuple[int, int]:
        r = call(wire, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            D.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]),
            DescribeShareGroupOffsetsResponse, 1, lambda r: r.groups[0].error_code)
        (p,) = r.groups[0].topics[0].partitions
        assert p.error_code == 0
        return p.start_offset, p.lag

    assert describe_v1() == (-1, -1)
    member, topic_id, _ = join(wire, group, topic)
    assert acquire(wire, group, member, topic_id) == []  # opens the session (epoch 0); starts at the end, 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(5):
        producer.produce(topic, f"l{i}".encode(), partition=0)
    producer.flush(30)
    fetched = wire.call(ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=1, max_wait_ms=2000,
                                          min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                                              ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                                  ShareFetchRequest.FetchPartition(partition_index=0)])]),
                        ShareFetchResponse, 1)
    assert [(a.first_offset, a.last_offset) for t in fetched.responses for p in t.partitions
            for a in p.acquired_records] == [(0, 4)]
    B = ShareAcknowledgeRequest
    acked = wire.call(B(group_id=group, member_id=member, share_session_epoch=2, topics=[B.AcknowledgeTopic(
        topic_id=topic_id, partitions=[B.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            B.AcknowledgementBatch(first_offset=0, last_offset=1, acknowledge_types=[1]),
            B.AcknowledgementBatch(first_offset=2, last_offset=2, acknowledge_types=[2]),
            B.AcknowledgementBatch(first_offset=3, last_offset=3, acknowledge_types=[3])])])]),
        ShareAcknowledgeResponse, 1)
    assert acked.error_code == 0 and acked.responses[0].partitions[0].error_code == 0
    start, lag = describe_v1()
    # Kafka 4.3.1 describes the start offset it persisted with the acknowledgement (0, with 0-1 and 3
    # complete); grete its SPSO after it (2, with 3 complete): the lag is the same.
    assert lag == 2 and start in (0, 2)
    assert heartbeat(wire, group, member, -1, topic).error_code == 0
    # Topics null: every share partition the group has, members or not.
    everything = call(wire, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]),
                      DescribeShareGroupOffsetsResponse, 1, lambda r: r.groups[0].error_code)
    assert [(t.topic_name, [(p.partition_index, p.lag) for p in t.partitions])
            for t in everything.groups[0].topics] == [(topic, [(0, 2)])]


def test_classic_and_consumer_apis_refuse_a_share_group_id(wire: Wire, make_topic: Any) -> None:
    """A share group's id, as Kafka 4.3.1 answers: JoinGroup INCONSISTENT_GROUP_PROTOCOL, the consumer
    protocol and OffsetCommit/OffsetDelete GROUP_ID_NOT_FOUND, SyncGroup/Heartbeat UNKNOWN_MEMBER_ID,
    DescribeGroups Dead; the share group itself is untouched."""
    topic = make_topic(partitions=1)
    group = f"sgx-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    member, _, epoch = join(wire, group, topic)
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    for version, member_id in ((9, ""), (5, "m1")):
        joined = wire.call(JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                            member_id=member_id, protocol_type="consumer", protocols=protocols),
                           JoinGroupResponse, version)
        assert (joined.error_code, joined.member_id, joined.generation_id) == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "", -1)
    not_consumer = f"Group {group} is not a consumer group."
    hb = wire.call(ConsumerGroupHeartbeatRequest(group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                                 rebalance_timeout_ms=10000, subscribed_topic_names=[topic],
                                                 topic_partitions=[]), ConsumerGroupHeartbeatResponse, 1)
    assert (hb.error_code, hb.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, not_consumer)
    (described,) = wire.call(ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse, 0).groups
    assert (described.error_code, described.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, not_consumer)
    committed = wire.call(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]),
        OffsetCommitResponse, 8)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    deleted = wire.call(OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=topic, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]),
        OffsetDeleteResponse, 0)
    assert (deleted.error_code, deleted.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    synced = wire.call(SyncGroupRequest(group_id=group, generation_id=1, member_id="m1", protocol_type="consumer",
                                        protocol_name="range", assignments=[]), SyncGroupResponse, 5)
    assert synced.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    beat = wire.call(HeartbeatRequest(group_id=group, generation_id=1, member_id="m1"), HeartbeatResponse, 4)
    assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    (classic,) = wire.call(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse, 5).groups
    assert (classic.error_code, classic.group_state, classic.members) == (0, "Dead", [])
    (share,) = wire.call(ShareGroupDescribeRequest(group_ids=[group]), ShareGroupDescribeResponse, 1).groups
    assert share.error_code == 0 and [m.member_id for m in share.members] == [member]
    assert share.members[0].client_host == "/127.0.0.1"
    assert heartbeat(wire, group, member, epoch, topic).error_code == 0
    assert heartbeat(wire, group, member, -1, topic).error_code == 0


def test_share_group_state_topic_configs(wire: Wire, make_topic: Any) -> None:
    """``__share_group_state`` as Kafka 4.3.1 creates it: not compacted (its share coordinator deletes
    the records no snapshot needs any more), kept for ever, compression as produced."""
    topic = make_topic(partitions=1)
    group = f"sgt-{uuid.uuid4().hex[:8]}"
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    member, topic_id, _ = join(wire, group, topic)
    acquire(wire, group, member, topic_id)  # the first share fetch creates the topic
    R = DescribeConfigsRequest
    wanted = ["cleanup.policy", "retention.ms", "compression.type"]

    def described() -> Any:
        r = wire.call(R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name="__share_group_state",
                                                             configuration_keys=wanted)]), DescribeConfigsResponse, 4)
        return {c.name: c.value for c in r.results[0].configs} if r.results[0].error_code == 0 else None

    deadline = time.monotonic() + 30
    while described() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert described() == {"cleanup.policy": "delete", "retention.ms": "-1", "compression.type": "producer"}
    assert heartbeat(wire, group, member, -1, topic).error_code == 0


def test_share_auto_offset_reset_by_duration(wire: Wire, broker: Any, make_topic: Any) -> None:
    """``share.auto.offset.reset=by_duration:PT1H``: a new share partition starts at the first record of
    the last hour (here: all three); a value Kafka does not read as a duration is INVALID_CONFIG."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = make_topic(partitions=1)
    group = f"sgr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def set_reset(value: str) -> None:
        resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", value, incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)

    for bad in ("by_duration:xyz", "by_duration:-PT1H", "BY_DURATION:PT1H", "Earliest"):
        with pytest.raises(KafkaException) as refused:
            set_reset(bad)
        error = refused.value.args[0]
        assert error.code() == 40 and error.str() == (  # INVALID_CONFIG, Kafka's text
            f"Invalid value {bad} for configuration share.auto.offset.reset: Invalid value `{bad}` for configuration "
            "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
            "'by_duration:<PnDTnHnMn.nS>'.")
    set_reset("by_duration:pt1h")  # letters in either case, as Java's Duration.parse
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(3):
        producer.produce(topic, f"d{i}".encode(), partition=0)
    producer.flush(30)
    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
         lambda r: r.coordinators[0].error_code)
    member, topic_id, _ = join(wire, group, topic)
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:  # Kafka initializes the share partition first
        got = acquire(wire, group, member, topic_id)
    assert sorted(o for first, last, _ in got for o in range(first, last + 1)) == [0, 1, 2]
    assert heartbeat(wire, group, member, -1, topic).error_code == 0


def test_share_isolation_level(wire: Wire, broker: Any, make_topic: Any) -> None:
    """``share.isolation.level``: a read_committed share group acquires up to the last stable offset
    and never the records of an aborted transaction (nor markers); a read_uncommitted one acquires
    to the high watermark, aborted records included. The open transaction's record is acquired by
    the read_committed group once committed."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = make_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    groups = {level: f"siso-{level[5:9]}-{uuid.uuid4().hex[:8]}" for level in ("read_committed", "read_uncommitted")}
    for level, group in groups.items():
        resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("share.isolation.level", level, incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"siso-{uuid.uuid4().hex[:8]}",
                    "linger.ms": 0})
    txn.init_transactions(30)
    for values, commit in ((("c0", "c1"), True), (("a0", "a1"), False)):
        txn.begin_transaction()
        for value in values:
            txn.produce(topic, value.encode(), partition=0)
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"n0", partition=0)
    plain.flush(30)
    txn.begin_transaction()
    txn.produce(topic, b"o0", partition=0)
    txn.flush(30)  # left open: the last stable offset stays at its first offset

    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"siso-{uuid.uuid4().hex[:8]}",
                       "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, 0, 0)])
    value_at: dict[int, str] = {}
    deadline = time.monotonic() + 30
    while len(value_at) < 6 and time.monotonic() < deadline:
        message = reader.poll(1)
        if message is not None and not message.error():
            value_at[message.offset()] = message.value().decode()
    reader.close()
    assert sorted(value_at.values()) == ["a0", "a1", "c0", "c1", "n0", "o0"]

    call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=list(groups.values())), FindCoordinatorResponse,
         4, lambda r: r.coordinators[0].error_code)
    members = {level: join(wire, group, topic) for level, group in groups.items()}
    session_epochs = dict.fromkeys(groups, 0)

    def fetch(level: str) -> list[tuple[int, int, int]]:
        """A ShareFetch in the member's share session (a new session would release what it holds)."""
        member, topic_id, _ = members[level]
        fetched = wire.call(ShareFetchRequest(
            group_id=groups[level], member_id=member, share_session_epoch=session_epochs[level], max_wait_ms=1000,
            min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                    ShareFetchRequest.FetchPartition(partition_index=0)])] if session_epochs[level] == 0 else []),
            ShareFetchResponse, 1)
        assert fetched.error_code == 0, fetched.error_message
        session_epochs[level] += 1
        return [(a.first_offset, a.last_offset, a.delivery_count)
                for t in fetched.responses for p in t.partitions for a in p.acquired_records]

    def acquired_values(level: str, expected: int) -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:  # Kafka initializes the share partition first
            got += [value_at[o] for first, last, _ in fetch(level) for o in range(first, last + 1) if o in value_at]
        assert not fetch(level)  # nothing more (a second's wait)
        return sorted(got)

    assert acquired_values("read_uncommitted", 6) == ["a0", "a1", "c0", "c1", "n0", "o0"]
    assert acquired_values("read_committed", 3) == ["c0", "c1", "n0"]
    txn.commit_transaction(30)
    assert acquired_values("read_committed", 1) == ["o0"]
    for level, group in groups.items():
        assert heartbeat(wire, group, members[level][0], -1, topic).error_code == 0
