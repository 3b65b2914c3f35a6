"""The authorization matrix: every client-facing API grete advertises, sent with grete's
codecs over SASL/PLAIN as alice (no ACLs) and as bob (exactly the ACLs the API needs, granted by the
super user admin through CreateAcls), against grete or the reference Kafka (--target).

One row per API, and per resource variant where Kafka decides differently. Each row says what Kafka
answers alice and bob (the error codes per resource, in the response's order, or what a filtering API
lets through) and, for APIs that change state, a probe read by admin that alice must leave as it was
and bob must change. Inter-broker APIs (4-7, 56) and the SASL ones are not client-facing."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from grete.protocol.acls import AclOperation as Op
from grete.protocol.acls import AclPermissionType, PatternType
from grete.protocol.acls import ResourceType as Res
from grete.protocol.errors import ErrorCode as E
from grete.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from grete.protocol.records.record import build_batch, simple_records
from grete.testing._wire import Wire

CLUSTER = "kafka-cluster"
SecureBroker = Any  # compat-tests/security/conftest.py's SecureBroker (conftests are not importable)
RETRIABLE = {E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
             E.CONCURRENT_TRANSACTIONS}


# --- per-row state -------------------------------------------------------------------------------

@dataclass
class Ctx:
    broker: SecureBroker
    admin: Wire
    topic: str  # 1 partition, one record written by admin
    new: str  # a topic name nobody created
    group: str
    txn: str
    client: str  # a quota entity / SCRAM user name
    node_id: int = 1
    pid: int = -1
    epoch: int = -1
    topic_id: uuid.UUID = uuid.UUID(int=0)
    token_id: str = ""  # a delegation token admin created for ``owner``

    @property
    def owner(self) -> str:  # a USER resource: the owner of the row's delegation tokens
        return f"User:{self.client}"

    def name(self, key: str) -> str:
        return {"topic": self.topic, "new": self.new, "group": self.group, "txn": self.txn,
                "cluster": CLUSTER, "owner": self.owner, "token": self.token_id}[key]


def error_codes(response: Any, version: int) -> list[int]:
    """Every error code of the response present at ``version``, in the response's order."""
    codes: list[int] = []

    def walk(obj: Any) -> None:
        for spec in type(obj)._FIELDS:
            if version not in spec.versions:
                continue
            value = getattr(obj, spec.name)
            if spec.name in ("error_code", "partition_error_code"):
                codes.append(int(value))
            elif spec.kind == "struct" and value is not None:
                for item in (value if spec.array else [value]):
                    walk(item)
    walk(response)
    return codes


def admin_call(ctx: Ctx, request: Any, response: Any, version: int) -> Any:
    return ctx.admin.call(request, response, version)


def retrying(call: Callable[[], Any], version: int, seconds: float = 60.0) -> Any:
    """Coordinators load lazily (Kafka creates __transaction_state on first use): retry those errors."""
    deadline = time.monotonic() + seconds
    while True:
        answer = call()
        if not RETRIABLE & set(error_codes(answer, version)) or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


# --- probes (admin's view) -----------------------------------------------------------------------

def end_offset(ctx: Ctx, earliest: bool = False) -> int:
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=ctx.topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=-2 if earliest else -1)])])
    answer = admin_call(ctx, request, ListOffsetsResponse, 7)
    return int(answer.topics[0].partitions[0].offset)


def topic_partitions(ctx: Ctx, name: str) -> int | None:
    answer = admin_call(ctx, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                             allow_auto_topic_creation=False), MetadataResponse, 12)
    topic = answer.topics[0]
    return None if topic.error_code == E.UNKNOWN_TOPIC_OR_PARTITION else len(topic.partitions)


def committed(ctx: Ctx) -> int:
    request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=ctx.group, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=ctx.topic,
                                                                                 partition_indexes=[0])])])
    answer = admin_call(ctx, request, OffsetFetchResponse, 8)
    return int(answer.groups[0].topics[0].partitions[0].committed_offset)


def topic_config(ctx: Ctx, key: str = "retention.ms") -> str | None:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=ctx.topic, configuration_keys=[key])])
    answer = admin_call(ctx, request, DescribeConfigsResponse, 4)
    return next((c.value for c in answer.results[0].configs if c.name == key), None)


def acls_on_new(ctx: Ctx) -> int:
    request = DescribeAclsRequest(resource_type_filter=Res.TOPIC, resource_name_filter=ctx.new,
                                  pattern_type_filter=PatternType.LITERAL, principal_filter=None,
                                  host_filter=None, operation=Op.ANY, permission_type=AclPermissionType.ANY)
    answer = admin_call(ctx, request, DescribeAclsResponse, 3)
    return sum(len(r.acls) for r in answer.resources)


def client_quota(ctx: Ctx) -> list[tuple[str, float]]:
    component = DescribeClientQuotasRequest.ComponentData(entity_type="client-id", match_type=0, match=ctx.client)
    answer = admin_call(ctx, DescribeClientQuotasRequest(components=[component], strict=True),
                        DescribeClientQuotasResponse, 1)
    return sorted((v.key, v.value) for e in (answer.entries or []) for v in e.values)


def scram_users(ctx: Ctx) -> list[int]:
    request = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequest.UserName(name=ctx.client)])
    answer = admin_call(ctx, request, DescribeUserScramCredentialsResponse, 0)
    return [int(info.mechanism) for r in answer.results for info in r.credential_infos]


# --- setup steps (run by admin before the row) ---------------------------------------------------

def commit_offset(ctx: Ctx) -> None:
    request = OffsetCommitRequest(group_id=ctx.group, generation_id_or_member_epoch=-1, member_id="",
                                  topics=[offset_commit_topic(ctx)])
    answer = retrying(lambda: admin_call(ctx, request, OffsetCommitResponse, 8), 8)
    assert error_codes(answer, 8) == [0], answer


def init_txn(ctx: Ctx) -> None:
    answer = retrying(lambda: admin_call(ctx, init_pid(ctx, ctx.txn), InitProducerIdResponse, 4), 4)
    assert answer.error_code == 0, answer
    ctx.pid, ctx.epoch = answer.producer_id, answer.producer_epoch


def txn_with_partition(ctx: Ctx) -> None:
    init_txn(ctx)
    answer = retrying(lambda: admin_call(ctx, add_partitions(ctx), AddPartitionsToTxnResponse, 3), 3)
    assert error_codes(answer, 3) == [0], answer


def idempotent_pid(ctx: Ctx) -> None:
    # Retried as clients do: a KRaft broker's first ids come from the controller (Kafka's
    # RPCProducerIdManager answers COORDINATOR_LOAD_IN_PROGRESS until its first block is there).
    answer = retrying(lambda: admin_call(ctx, init_pid(ctx, None), InitProducerIdResponse, 4), 4)
    assert answer.error_code == 0, answer
    ctx.pid, ctx.epoch = answer.producer_id, answer.producer_epoch


def idempotent_produce(ctx: Ctx) -> ProduceRequest:
    batch = build_batch(simple_records([b"v"]), producer_id=ctx.pid, producer_epoch=ctx.epoch, base_sequence=0)
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000,
                          topic_data=[ProduceRequest.TopicProduceData(name=ctx.topic, partition_data=[
                              ProduceRequest.PartitionProduceData(index=0, records=bytes(batch))])])


def txn_with_offsets(ctx: Ctx) -> None:
    init_txn(ctx)
    request = AddOffsetsToTxnRequest(transactional_id=ctx.txn, producer_id=ctx.pid, producer_epoch=ctx.epoch,
                                     group_id=ctx.group)
    answer = retrying(lambda: admin_call(ctx, request, AddOffsetsToTxnResponse, 3), 3)
    assert answer.error_code == 0, answer


def describe_tokens(ctx: Ctx) -> DescribeDelegationTokenRequest:
    return DescribeDelegationTokenRequest(owners=[DescribeDelegationTokenRequest.DescribeDelegationTokenOwner(
        principal_type="User", principal_name=ctx.client)])


def owned_tokens(ctx: Ctx) -> int:
    answer = admin_call(ctx, describe_tokens(ctx), DescribeDelegationTokenResponse, 3)
    assert answer.error_code == 0, answer
    return len(answer.tokens)


def token_for_owner(ctx: Ctx) -> None:
    """admin (a super user) creates a token owned by the row's user; on Kafka it reaches the broker's
    cache asynchronously, so wait until admin can describe it."""
    answer = admin_call(ctx, create_token_for_owner(ctx), CreateDelegationTokenResponse, 3)
    assert answer.error_code == 0, answer
    ctx.token_id = answer.token_id
    wait_until(lambda: owned_tokens(ctx) == 1, what="the token to reach the broker")


def create_token_for_owner(ctx: Ctx) -> CreateDelegationTokenRequest:
    return CreateDelegationTokenRequest(owner_principal_type="User", owner_principal_name=ctx.client,
                                        renewers=[], max_lifetime_ms=-1)


def acl_for_carol(ctx: Ctx) -> None:
    answer = admin_call(ctx, create_acl_for_carol(ctx), CreateAclsResponse, 3)
    assert error_codes(answer, 3) == [0], answer
    wait_until(lambda: acls_on_new(ctx) == 1)


# --- requests ------------------------------------------------------------------------------------

def produce(ctx: Ctx, transactional: bool = False) -> ProduceRequest:
    batch = build_batch(simple_records([b"v"]), producer_id=ctx.pid if transactional else -1,
                        producer_epoch=ctx.epoch if transactional else -1,
                        base_sequence=0 if transactional else -1, transactional=transactional)
    return ProduceRequest(transactional_id=ctx.txn if transactional else None, acks=-1, timeout_ms=10_000,
                          topic_data=[ProduceRequest.TopicProduceData(name=ctx.topic, partition_data=[
                              ProduceRequest.PartitionProduceData(index=0, records=bytes(batch))])])


def fetch(ctx: Ctx) -> FetchRequest:
    partition = FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                        topics=[FetchRequest.FetchTopic(topic=ctx.topic, partitions=[partition])])


def follower_fetch(ctx: Ctx) -> FetchRequest:
    """A Fetch as a replica sends it (replica id 9, a broker this single node does not know)."""
    request = fetch(ctx)
    request.replica_id = 9
    return request


def metadata(names: list[str] | None, auto_create: bool = False) -> MetadataRequest:
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create)


def offset_commit_topic(ctx: Ctx) -> OffsetCommitRequest.OffsetCommitRequestTopic:
    return OffsetCommitRequest.OffsetCommitRequestTopic(name=ctx.topic, partitions=[
        OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])


def init_pid(ctx: Ctx, txn: str | None) -> InitProducerIdRequest:
    return InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60_000, producer_id=-1,
                                 producer_epoch=-1)


def add_partitions(ctx: Ctx) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=ctx.txn, v3_and_below_producer_id=ctx.pid,
        v3_and_below_producer_epoch=ctx.epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=ctx.topic, partitions=[0])])


def create_acl_for_carol(ctx: Ctx) -> CreateAclsRequest:
    return CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=Res.TOPIC, resource_name=ctx.new, resource_pattern_type=PatternType.LITERAL,
        principal="User:carol", host="*", operation=Op.READ, permission_type=AclPermissionType.ALLOW)])


def scram_upsertion(ctx: Ctx) -> AlterUserScramCredentialsRequest:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", b"carol-secret", salt, 4096)
    return AlterUserScramCredentialsRequest(deletions=[], upsertions=[
        AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=ctx.client, mechanism=1, iterations=4096, salt=salt, salted_password=salted)])


def create_new_topic(ctx: Ctx) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=ctx.new, num_partitions=1, replication_factor=1)], timeout_ms=10_000)


def create_topic_outcome(answer: Any, version: int, ctx: Ctx) -> object:
    """(error, config error, partitions, replication factor, whether configs came back)."""
    return [(t.error_code, t.topic_config_error_code, t.num_partitions, t.replication_factor, bool(t.configs))
            for t in answer.topics]


def topic_codes(name_of: Callable[[Ctx], str]) -> Callable[[Any, int, Ctx], object]:
    def outcome(answer: Any, version: int, ctx: Ctx) -> object:
        return [t.error_code for t in answer.topics if t.name == name_of(ctx)]
    return outcome


def listed(names: Callable[[Any], list[str]], key: str) -> Callable[[Any, int, Ctx], object]:
    """For filtering APIs: the top-level error code(s) and whether the row's resource is in the answer."""
    def outcome(answer: Any, version: int, ctx: Ctx) -> object:
        return ctx.name(key) in names(answer)
    return outcome


def codes(answer: Any, version: int, ctx: Ctx) -> object:
    return error_codes(answer, version)


# --- the matrix ----------------------------------------------------------------------------------

Acl = tuple[Res, str, Op]


@dataclass(frozen=True)
class Row:
    id: str
    version: int
    request: Callable[[Ctx], Any]
    response: type
    alice: object
    bob: object
    acls: tuple[Acl, ...] = ()
    outcome: Callable[[Any, int, Ctx], object] = codes
    probe: Callable[[Ctx], object] | None = None
    setup: tuple[Callable[[Ctx], None], ...] = ()
    grete_xfail: str | None = None  # "differs from Kafka: ..." (a handler another branch owns)


T, G, X, C = "topic", "group", "txn", "cluster"
TA, GA, CA, XA = E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED, \
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

ROWS: list[Row] = [
    Row("Produce", 9, produce, ProduceResponse, [TA], [0], ((Res.TOPIC, T, Op.WRITE),), probe=end_offset),
    Row("Produce-transactional", 9, lambda c: produce(c, transactional=True), ProduceResponse, [XA], [0],
        ((Res.TRANSACTIONAL_ID, X, Op.WRITE), (Res.TOPIC, T, Op.WRITE)), probe=end_offset,
        setup=(txn_with_partition,)),
    # Since Kafka 3.0 an idempotent producer needs only WRITE on the topic (KIP-679).
    Row("Produce-idempotent", 9, idempotent_produce, ProduceResponse, [TA], [0], ((Res.TOPIC, T, Op.WRITE),),
        probe=end_offset, setup=(idempotent_pid,)),
    Row("Fetch", 12, fetch, FetchResponse, [0, TA], [0, 0], ((Res.TOPIC, T, Op.READ),)),
    # Kafka's isFromFollower branch: CLUSTER_ACTION, else every partition TOPIC_AUTHORIZATION_FAILED;
    # allowed, a fetch from a broker that is no replica of the partition is refused for that.
    Row("Fetch-follower", 12, follower_fetch, FetchResponse, [0, TA], [0, E.NOT_LEADER_OR_FOLLOWER],
        ((Res.CLUSTER, C, Op.CLUSTER_ACTION),)),
    Row("ListOffsets", 7, lambda c: ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=c.topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
        ListOffsetsResponse, [TA], [0], ((Res.TOPIC, T, Op.DESCRIBE),)),
    Row("Metadata-named", 12, lambda c: metadata([c.topic]), MetadataResponse, [TA], [0],
        ((Res.TOPIC, T, Op.DESCRIBE),), outcome=topic_codes(lambda c: c.topic)),
    Row("Metadata-by-topic-id", 12, lambda c: MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=c.topic_id, name=None)],
        allow_auto_topic_creation=False), MetadataResponse, [(TA, False)], [(0, True)],
        ((Res.TOPIC, T, Op.DESCRIBE),),
        outcome=lambda a, v, c: [(t.error_code, t.name == c.topic) for t in a.topics]),
    Row("Metadata-all-topics-filtered", 12, lambda c: metadata(None), MetadataResponse, False, True,
        ((Res.TOPIC, T, Op.DESCRIBE),), outcome=listed(lambda a: [t.name for t in a.topics], T)),
    Row("Metadata-auto-create", 12, lambda c: metadata([c.new], auto_create=True), MetadataResponse, [TA],
        [E.UNKNOWN_TOPIC_OR_PARTITION], ((Res.TOPIC, "new", Op.DESCRIBE), (Res.TOPIC, "new", Op.CREATE)),
        outcome=topic_codes(lambda c: c.new), probe=lambda c: topic_partitions(c, c.new)),
    Row("OffsetCommit", 8, lambda c: OffsetCommitRequest(group_id=c.group, generation_id_or_member_epoch=-1,
                                                         member_id="", topics=[offset_commit_topic(c)]),
        OffsetCommitResponse, [GA], [0], ((Res.GROUP, G, Op.READ), (Res.TOPIC, T, Op.READ)), probe=committed),
    Row("OffsetCommit-topic-denied", 8, lambda c: OffsetCommitRequest(
        group_id=c.group, generation_id_or_member_epoch=-1, member_id="", topics=[offset_commit_topic(c)]),
        OffsetCommitResponse, [GA], [TA], ((Res.GROUP, G, Op.READ),)),
    Row("OffsetFetch", 8, lambda c: OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=c.group, topics=None)]), OffsetFetchResponse, [GA], [0, 0],
        ((Res.GROUP, G, Op.DESCRIBE), (Res.TOPIC, T, Op.DESCRIBE)), setup=(commit_offset,)),
    Row("OffsetFetch-named-topic-denied", 8, lambda c: OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=c.group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopics(name=c.topic, partition_indexes=[0])])]),
        OffsetFetchResponse, [GA], [TA, 0], ((Res.GROUP, G, Op.DESCRIBE),), setup=(commit_offset,)),
    Row("OffsetFetch-all-topics-filtered", 8, lambda c: OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=c.group, topics=None)]),
        OffsetFetchResponse, [GA], [0], ((Res.GROUP, G, Op.DESCRIBE),), setup=(commit_offset,)),
    Row("FindCoordinator-group", 4, lambda c: FindCoordinatorRequest(key_type=0, coordinator_keys=[c.group]),
        FindCoordinatorResponse, [GA], [0], ((Res.GROUP, G, Op.DESCRIBE),)),
    Row("FindCoordinator-group-v3", 3, lambda c: FindCoordinatorRequest(key=c.group, key_type=0),
        FindCoordinatorResponse, [GA], [0], ((Res.GROUP, G, Op.DESCRIBE),)),
    Row("FindCoordinator-transaction", 4, lambda c: FindCoordinatorRequest(key_type=1, coordinator_keys=[c.txn]),
        FindCoordinatorResponse, [XA], [0], ((Res.TRANSACTIONAL_ID, X, Op.DESCRIBE),)),
    Row("JoinGroup", 9, lambda c: JoinGroupRequest(
        group_id=c.group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
        JoinGroupResponse, [GA], [E.MEMBER_ID_REQUIRED], ((Res.GROUP, G, Op.READ),)),
    Row("Heartbeat", 4, lambda c: HeartbeatRequest(group_id=c.group, generation_id=1, member_id="m-1"),
        HeartbeatResponse, [GA], [E.UNKNOWN_MEMBER_ID], ((Res.GROUP, G, Op.READ),)),
    Row("SyncGroup", 5, lambda c: SyncGroupRequest(group_id=c.group, generation_id=1, member_id="m-1",
                                                   protocol_type="consumer", protocol_name="range", assignments=[]),
        SyncGroupResponse, [GA], [E.UNKNOWN_MEMBER_ID], ((Res.GROUP, G, Op.READ),)),
    Row("LeaveGroup", 5, lambda c: LeaveGroupRequest(group_id=c.group, members=[
        LeaveGroupRequest.MemberIdentity(member_id="m-1")]),
        LeaveGroupResponse, [GA], [0, E.UNKNOWN_MEMBER_ID], ((Res.GROUP, G, Op.READ),)),
    Row("DescribeGroups", 5, lambda c: DescribeGroupsRequest(groups=[c.group]), DescribeGroupsResponse,
        [GA], [0], ((Res.GROUP, G, Op.DESCRIBE),), setup=(commit_offset,)),
    Row("ListGroups-filtered-by-group", 4, lambda c: ListGroupsRequest(states_filter=[]), ListGroupsResponse,
        False, True, ((Res.GROUP, G, Op.DESCRIBE),), outcome=listed(lambda a: [g.group_id for g in a.groups], G),
        setup=(commit_offset,)),
    Row("ListGroups-cluster-describe", 4, lambda c: ListGroupsRequest(states_filter=[]), ListGroupsResponse,
        False, True, ((Res.CLUSTER, C, Op.DESCRIBE),), outcome=listed(lambda a: [g.group_id for g in a.groups], G),
        setup=(commit_offset,)),
    Row("CreateTopics-topic-create", 7, lambda c: CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=c.new, num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, [TA], [0],
        ((Res.TOPIC, "new", Op.CREATE),), probe=lambda c: topic_partitions(c, c.new)),
    # The configs CreateTopics returns need DESCRIBE_CONFIGS on the topic (topic_config_error_code).
    Row("CreateTopics-configs-without-describe-configs", 7, create_new_topic, CreateTopicsResponse,
        [(TA, 0, -1, -1, False)], [(0, TA, -1, -1, False)], ((Res.TOPIC, "new", Op.CREATE),), outcome=create_topic_outcome,
        probe=lambda c: topic_partitions(c, c.new)),
    Row("CreateTopics-configs-with-describe-configs", 7, create_new_topic, CreateTopicsResponse,
        [(TA, 0, -1, -1, False)], [(0, 0, 1, 1, True)],
        ((Res.TOPIC, "new", Op.CREATE), (Res.TOPIC, "new", Op.DESCRIBE_CONFIGS)),
        outcome=create_topic_outcome, probe=lambda c: topic_partitions(c, c.new)),
    Row("CreateTopics-cluster-create", 7, lambda c: CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=c.new, num_partitions=1, replication_factor=1)], timeout_ms=10_000), CreateTopicsResponse, [TA], [0],
        ((Res.CLUSTER, C, Op.CREATE),), probe=lambda c: topic_partitions(c, c.new)),
    Row("DeleteTopics", 5, lambda c: DeleteTopicsRequest(topic_names=[c.topic], timeout_ms=10_000),
        DeleteTopicsResponse, [TA], [0], ((Res.TOPIC, T, Op.DELETE),), probe=lambda c: topic_partitions(c, c.topic)),
    Row("DeleteTopics-by-id", 6, lambda c: DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(
        name=None, topic_id=c.topic_id)], timeout_ms=10_000),
        DeleteTopicsResponse, [TA], [0], ((Res.TOPIC, T, Op.DELETE),), probe=lambda c: topic_partitions(c, c.topic)),
    Row("DeleteRecords", 2, lambda c: DeleteRecordsRequest(timeout_ms=10_000, topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name=c.topic, partitions=[
            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=1)])]),
        DeleteRecordsResponse, [TA], [0], ((Res.TOPIC, T, Op.DELETE),), probe=lambda c: end_offset(c, earliest=True)),
    Row("InitProducerId-transactional", 4, lambda c: init_pid(c, c.txn), InitProducerIdResponse, [XA], [0],
        ((Res.TRANSACTIONAL_ID, X, Op.WRITE),)),
    Row("InitProducerId-idempotent-cluster", 4, lambda c: init_pid(c, None), InitProducerIdResponse, [CA], [0],
        ((Res.CLUSTER, C, Op.IDEMPOTENT_WRITE),)),
    Row("InitProducerId-idempotent-topic-write", 4, lambda c: init_pid(c, None), InitProducerIdResponse, [CA],
        [0], ((Res.TOPIC, T, Op.WRITE),)),
    Row("OffsetForLeaderEpoch", 4, lambda c: OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=c.topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
        OffsetForLeaderEpochResponse, [TA], [0], ((Res.TOPIC, T, Op.DESCRIBE),)),
    Row("OffsetForLeaderEpoch-cluster-action", 4, lambda c: OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=c.topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
        OffsetForLeaderEpochResponse, [TA], [0], ((Res.CLUSTER, C, Op.CLUSTER_ACTION),)),
    Row("AddPartitionsToTxn", 3, add_partitions, AddPartitionsToTxnResponse, [XA], [0],
        ((Res.TRANSACTIONAL_ID, X, Op.WRITE), (Res.TOPIC, T, Op.WRITE)), setup=(init_txn,)),
    # The brokers' form (KIP-890 part 1, a leader verifying): CLUSTER_ACTION, no topic or id ACLs.
    Row("AddPartitionsToTxn-broker-verify-only", 4, lambda c: AddPartitionsToTxnRequest(transactions=[
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=c.txn, producer_id=c.pid, producer_epoch=c.epoch, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=c.topic, partitions=[0])])]),
        AddPartitionsToTxnResponse, [CA], [0, 0], ((Res.CLUSTER, C, Op.CLUSTER_ACTION),),
        setup=(txn_with_partition,)),
    Row("AddOffsetsToTxn", 3, lambda c: AddOffsetsToTxnRequest(transactional_id=c.txn, producer_id=c.pid,
                                                               producer_epoch=c.epoch, group_id=c.group),
        AddOffsetsToTxnResponse, [XA], [0], ((Res.TRANSACTIONAL_ID, X, Op.WRITE), (Res.GROUP, G, Op.READ)),
        setup=(init_txn,)),
    Row("EndTxn", 3, lambda c: EndTxnRequest(transactional_id=c.txn, producer_id=c.pid, producer_epoch=c.epoch,
                                             committed=False),
        EndTxnResponse, [XA], [0], ((Res.TRANSACTIONAL_ID, X, Op.WRITE),), setup=(txn_with_partition,)),
    Row("TxnOffsetCommit", 3, lambda c: TxnOffsetCommitRequest(
        transactional_id=c.txn, group_id=c.group, producer_id=c.pid, producer_epoch=c.epoch, generation_id=-1,
        member_id="", topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=c.topic, partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
        TxnOffsetCommitResponse, [XA], [0],
        ((Res.TRANSACTIONAL_ID, X, Op.WRITE), (Res.GROUP, G, Op.READ), (Res.TOPIC, T, Op.READ)),
        setup=(txn_with_offsets,)),
    Row("WriteTxnMarkers", 1, lambda c: WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=c.pid, producer_epoch=c.epoch, transaction_result=False, coordinator_epoch=0,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=c.topic, partition_indexes=[0])])]),
        WriteTxnMarkersResponse, [CA], [0], ((Res.CLUSTER, C, Op.CLUSTER_ACTION),), setup=(init_txn,)),
    Row("DescribeAcls", 3, lambda c: DescribeAclsRequest(
        resource_type_filter=Res.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter=None, host_filter=None, operation=Op.ANY, permission_type=AclPermissionType.ANY),
        DescribeAclsResponse, [CA], [0],
        ((Res.CLUSTER, C, Op.DESCRIBE),)),
    Row("CreateAcls", 3, create_acl_for_carol, CreateAclsResponse, [CA], [0], ((Res.CLUSTER, C, Op.ALTER),),
        probe=acls_on_new),
    Row("DeleteAcls", 3, lambda c: DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=Res.TOPIC, resource_name_filter=c.new, pattern_type_filter=PatternType.LITERAL,
        principal_filter="User:carol", host_filter=None, operation=Op.ANY,
        permission_type=AclPermissionType.ANY)]),
        DeleteAclsResponse, [CA], [0, 0], ((Res.CLUSTER, C, Op.ALTER),), probe=acls_on_new, setup=(acl_for_carol,)),
    Row("DescribeConfigs-topic", 4, lambda c: DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=c.topic,
                                                       configuration_keys=["retention.ms"])]),
        DescribeConfigsResponse, [TA], [0], ((Res.TOPIC, T, Op.DESCRIBE_CONFIGS),)),
    Row("DescribeConfigs-broker", 4, lambda c: DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name=str(c.node_id),
                                                       configuration_keys=["num.partitions"])]),
        DescribeConfigsResponse, [CA], [0], ((Res.CLUSTER, C, Op.DESCRIBE_CONFIGS),)),
    Row("AlterConfigs-topic", 2, lambda c: AlterConfigsRequest(resources=[AlterConfigsRequest.AlterConfigsResource(
        resource_type=2, resource_name=c.topic, configs=[AlterConfigsRequest.AlterableConfig(
            name="retention.ms", value="123456")])]),
        AlterConfigsResponse, [TA], [0], ((Res.TOPIC, T, Op.ALTER_CONFIGS),), probe=topic_config),
    Row("IncrementalAlterConfigs-topic", 1, lambda c: IncrementalAlterConfigsRequest(resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name=c.topic, configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name="retention.ms", config_operation=0,
                                                           value="234567")])]),
        IncrementalAlterConfigsResponse, [TA], [0], ((Res.TOPIC, T, Op.ALTER_CONFIGS),), probe=topic_config),
    Row("IncrementalAlterConfigs-broker-validate-only", 1, lambda c: IncrementalAlterConfigsRequest(
        validate_only=True, resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=4, resource_name=str(c.node_id), configs=[IncrementalAlterConfigsRequest.AlterableConfig(
                name="log.cleaner.backoff.ms", config_operation=0, value="20000")])]),
        IncrementalAlterConfigsResponse, [CA], [0], ((Res.CLUSTER, C, Op.ALTER_CONFIGS),)),
    Row("AlterReplicaLogDirs", 2, lambda c: AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
        path="/nonexistent-dir", topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
            name=c.topic, partitions=[0])])]),
        AlterReplicaLogDirsResponse, [CA], [E.LOG_DIR_NOT_FOUND], ((Res.CLUSTER, C, Op.ALTER),)),
    Row("DescribeLogDirs", 4, lambda c: DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse,
        (CA, False), (0, True), ((Res.CLUSTER, C, Op.DESCRIBE),),
        outcome=lambda a, v, c: (a.error_code, bool(a.results))),
    Row("CreatePartitions", 3, lambda c: CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=c.topic, count=2, assignments=None)], timeout_ms=10_000), CreatePartitionsResponse, [TA], [0],
        ((Res.TOPIC, T, Op.ALTER),), probe=lambda c: topic_partitions(c, c.topic)),
    Row("DeleteGroups", 2, lambda c: DeleteGroupsRequest(groups_names=[c.group]), DeleteGroupsResponse, [GA], [0],
        ((Res.GROUP, G, Op.DELETE),), probe=committed, setup=(commit_offset,)),
    Row("ElectLeaders", 2, lambda c: ElectLeadersRequest(election_type=0, timeout_ms=10_000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=c.topic, partitions=[0])]),
        ElectLeadersResponse, [CA, CA], [0, E.ELECTION_NOT_NEEDED], ((Res.CLUSTER, C, Op.ALTER),)),
    Row("UpdateFeatures", 1, lambda c: UpdateFeaturesRequest(timeout_ms=10_000, validate_only=True, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature="group.version", max_version_level=1)]),
        # The top-level code only: whether level 1 is valid is the version's business (3.9 refuses it).
        UpdateFeaturesResponse, [CA], [0], ((Res.CLUSTER, C, Op.ALTER),), outcome=lambda a, v, c: [a.error_code]),
    Row("AlterPartitionReassignments", 0, lambda c: AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=c.topic, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=None)])]),
        AlterPartitionReassignmentsResponse, [CA, CA], [0, E.NO_REASSIGNMENT_IN_PROGRESS], ((Res.CLUSTER, C, Op.ALTER),)),
    Row("ListPartitionReassignments", 0, lambda c: ListPartitionReassignmentsRequest(timeout_ms=10_000, topics=None),
        ListPartitionReassignmentsResponse, [CA], [0], ((Res.CLUSTER, C, Op.DESCRIBE),)),
    Row("OffsetDelete", 0, lambda c: OffsetDeleteRequest(group_id=c.group, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=c.topic, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]),
        OffsetDeleteResponse, [GA], [0, 0], ((Res.GROUP, G, Op.DELETE), (Res.TOPIC, T, Op.READ)),
        probe=committed, setup=(commit_offset,)),
    Row("DescribeClientQuotas", 1, lambda c: DescribeClientQuotasRequest(components=[], strict=False),
        DescribeClientQuotasResponse, [CA], [0], ((Res.CLUSTER, C, Op.DESCRIBE_CONFIGS),)),
    Row("AlterClientQuotas", 1, lambda c: AlterClientQuotasRequest(validate_only=False, entries=[
        AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=c.client)],
            ops=[AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=1024000.0, remove=False)])]),
        AlterClientQuotasResponse, [CA], [0], ((Res.CLUSTER, C, Op.ALTER_CONFIGS),), probe=client_quota),
    Row("DescribeUserScramCredentials", 0, lambda c: DescribeUserScramCredentialsRequest(users=[]),
        DescribeUserScramCredentialsResponse, [CA], [0], ((Res.CLUSTER, C, Op.DESCRIBE),)),
    Row("AlterUserScramCredentials", 0, scram_upsertion, AlterUserScramCredentialsResponse, [CA], [0],
        ((Res.CLUSTER, C, Op.ALTER),), probe=scram_users),
    # Delegation tokens: another owner's token needs CREATE_TOKENS on that USER; describing another
    # owner's tokens needs DESCRIBE_TOKENS on the USER or DESCRIBE on the DELEGATION_TOKEN (listed or not).
    Row("CreateDelegationToken-other-owner", 3, create_token_for_owner, CreateDelegationTokenResponse,
        [E.DELEGATION_TOKEN_AUTHORIZATION_FAILED], [0], ((Res.USER, "owner", Op.CREATE_TOKENS),), probe=owned_tokens),
    Row("DescribeDelegationToken-owner-describe-tokens", 3, describe_tokens, DescribeDelegationTokenResponse,
        (0, False), (0, True), ((Res.USER, "owner", Op.DESCRIBE_TOKENS),),
        outcome=lambda a, v, c: (a.error_code, c.token_id in [t.token_id for t in a.tokens]),
        setup=(token_for_owner,)),
    Row("DescribeDelegationToken-token-describe", 3, describe_tokens, DescribeDelegationTokenResponse,
        (0, False), (0, True), ((Res.DELEGATION_TOKEN, "token", Op.DESCRIBE),),
        outcome=lambda a, v, c: (a.error_code, c.token_id in [t.token_id for t in a.tokens]),
        setup=(token_for_owner,)),
    # Kafka checks nothing for DescribeCluster (KafkaApis.handleDescribeCluster): anyone authenticated.
    Row("DescribeCluster-no-check", 0, lambda c: DescribeClusterRequest(), DescribeClusterResponse, [0], [0]),
    # Authorized-operations bitfields (1 << operation): what each principal may do.
    Row("DescribeCluster-authorized-operations", 0, lambda c: DescribeClusterRequest(
        include_cluster_authorized_operations=True), DescribeClusterResponse, 0, 1 << Op.DESCRIBE | 1 << Op.ALTER,
        ((Res.CLUSTER, C, Op.ALTER),), outcome=lambda a, v, c: a.cluster_authorized_operations),
    Row("Metadata-topic-authorized-operations", 12, lambda c: MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=c.topic)], allow_auto_topic_creation=False,
        include_topic_authorized_operations=True), MetadataResponse, [(TA, -2147483648)],
        [(0, 1 << Op.WRITE | 1 << Op.DESCRIBE)], ((Res.TOPIC, T, Op.WRITE),),
        outcome=lambda a, v, c: [(t.error_code, t.topic_authorized_operations) for t in a.topics]),
    Row("DescribeGroups-authorized-operations", 5, lambda c: DescribeGroupsRequest(
        groups=[c.group], include_authorized_operations=True), DescribeGroupsResponse, [(GA, -2147483648)],
        [(0, 1 << Op.READ | 1 << Op.DESCRIBE)], ((Res.GROUP, G, Op.READ),),
        outcome=lambda a, v, c: [(g.error_code, g.authorized_operations) for g in a.groups],
        setup=(commit_offset,)),
    Row("DescribeProducers", 0, lambda c: DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name=c.topic, partition_indexes=[0])]),
        DescribeProducersResponse, [TA], [0], ((Res.TOPIC, T, Op.READ),)),
    Row("DescribeTransactions", 0, lambda c: DescribeTransactionsRequest(transactional_ids=[c.txn]),
        DescribeTransactionsResponse, [XA], [0], ((Res.TRANSACTIONAL_ID, X, Op.DESCRIBE),), setup=(init_txn,)),
    Row("ListTransactions-filtered", 1, lambda c: ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
        ListTransactionsResponse, False, True, ((Res.TRANSACTIONAL_ID, X, Op.DESCRIBE),),
        outcome=listed(lambda a: [t.transactional_id for t in a.transaction_states], X), setup=(init_txn,)),
    Row("ApiVersions-no-check", 3, lambda c: ApiVersionsRequest(client_software_name="grete-matrix",
                                                                 client_software_version="1"),
        ApiVersionsResponse, [0], [0]),
]


# --- running a row -------------------------------------------------------------------------------

def wait_until(check: Callable[[], bool], seconds: float = 15.0, what: str = "the ACL change") -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds}s for {what}"
        time.sleep(0.05)


def bob_acls(ctx: Ctx) -> int:
    request = DescribeAclsRequest(resource_type_filter=Res.ANY, resource_name_filter=None,
                                  pattern_type_filter=PatternType.ANY, principal_filter="User:bob",
                                  operation=Op.ANY, permission_type=AclPermissionType.ANY, host_filter=None)
    answer = admin_call(ctx, request, DescribeAclsResponse, 3)
    assert answer.error_code == 0, answer
    return sum(len(r.acls) for r in answer.resources)


def grant_bob(ctx: Ctx, acls: tuple[Acl, ...]) -> None:
    creations = [CreateAclsRequest.AclCreation(
        resource_type=res, resource_name=ctx.name(key), resource_pattern_type=PatternType.LITERAL,
        principal="User:bob", host="*", operation=op, permission_type=AclPermissionType.ALLOW)
        for res, key, op in acls]
    answer = admin_call(ctx, CreateAclsRequest(creations=creations), CreateAclsResponse, 3)
    assert error_codes(answer, 3) == [0] * len(acls), answer
    wait_until(lambda: bob_acls(ctx) == len(acls))


def revoke_bob(ctx: Ctx) -> None:
    answer = admin_call(ctx, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=Res.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter="User:bob", host_filter=None, operation=Op.ANY,
        permission_type=AclPermissionType.ANY)]), DeleteAclsResponse, 3)
    assert answer.filter_results[0].error_code == 0, answer
    wait_until(lambda: bob_acls(ctx) == 0)


def create_row_topic(ctx: Ctx) -> None:
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=ctx.topic, num_partitions=1, replication_factor=1)], timeout_ms=10_000)
    answer = admin_call(ctx, request, CreateTopicsResponse, 7)
    assert error_codes(answer, 7) == [0], answer
    ctx.topic_id = answer.topics[0].topic_id
    deadline = time.monotonic() + 15
    while True:  # a leader, then one record
        answer = admin_call(ctx, produce(ctx), ProduceResponse, 9)
        if error_codes(answer, 9) == [0] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert error_codes(answer, 9) == [0], answer


@pytest.fixture(scope="module")
def admin(secure_broker: SecureBroker) -> Any:
    wire = secure_broker.login("admin")
    # As clients do: FindCoordinator first, which makes Kafka create __consumer_offsets and
    # __transaction_state (without it the coordinators answer NOT_COORDINATOR for ever).
    for key_type in (0, 1):
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=["warm-up"])
        answer = retrying(lambda r=request: wire.call(r, FindCoordinatorResponse, 4), 4)  # type: ignore[misc]
        assert error_codes(answer, 4) == [0], answer
    yield wire
    wire.close()


@pytest.fixture(scope="module")
def node_id(admin: Wire) -> int:
    answer = admin.call(DescribeClusterRequest(), DescribeClusterResponse, 0)
    return int(answer.brokers[0].broker_id)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_authorization_matrix(row: Row, secure_broker: SecureBroker, admin: Wire, node_id: int,
                              request: pytest.FixtureRequest) -> None:
    if row.grete_xfail and secure_broker.is_grete:
        request.applymarker(pytest.mark.xfail(reason=row.grete_xfail, strict=True))
    uid = uuid.uuid4().hex[:8]
    ctx = Ctx(secure_broker, admin, topic=f"authz-{uid}", new=f"authz-new-{uid}", group=f"g-{uid}",
              txn=f"tx-{uid}", client=f"c-{uid}", node_id=node_id)
    create_row_topic(ctx)
    for step in row.setup:
        step(ctx)
    before = row.probe(ctx) if row.probe else None

    alice = secure_broker.login("alice")
    try:
        got = row.outcome(alice.call(row.request(ctx), row.response, row.version), row.version, ctx)
    finally:
        alice.close()
    assert got == row.alice, f"alice (no ACLs) got {got}, Kafka answers {row.alice}"
    if row.probe:
        assert row.probe(ctx) == before, "alice's request changed the state"

    grant_bob(ctx, row.acls)
    bob = secure_broker.login("bob")
    try:
        got = row.outcome(retrying(lambda: bob.call(row.request(ctx), row.response, row.version), row.version),
                          row.version, ctx)
    finally:
        bob.close()
        revoke_bob(ctx)
    assert got == row.bob, f"bob (ACLs {row.acls}) got {got}, Kafka answers {row.bob}"
    if row.probe:  # some effects are asynchronous in Kafka (auto-creation, ACLs reaching the broker)
        probe = row.probe
        wait_until(lambda: probe(ctx) != before, what="bob's request to take effect")
