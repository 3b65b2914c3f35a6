"""Kafka's error codes for transactional requests out of order, fencing and bad input, measured on
the reference brokers and required of grete (the issue's "bad input" list)."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402
from grete.testing.routed_wire import open_wire  # noqa: E402
from tests.broker._txn import (  # noqa: E402
    KIP890_VERSIONS,
    LEGACY_VERSIONS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Txn,
    describe,
    latest,
    settled,
)


@pytest.fixture(autouse=True, params=["legacy", "kip890"])
def client_versions(request, monkeypatch):
    """Every scenario twice: with the versions of a client before KIP-890, and with KIP-890 part 1's
    (InitProducerId 5, AddOffsetsToTxn 4, EndTxn 4, TxnOffsetCommit 4), which Kafka 4.3.1 answers alike
    except where TRANSACTION_ABORTABLE replaces an older code."""
    versions = LEGACY_VERSIONS if request.param == "legacy" else KIP890_VERSIONS
    if versions is KIP890_VERSIONS and request.config.getoption("--target", default=None) == "kafka-3.9":
        pytest.skip("KIP-890 part 1 versions: measured on Kafka 4.3.1 only")
    monkeypatch.setattr(Txn, "versions", versions)
    return versions


@pytest.fixture
def wire(broker):
    w = open_wire(broker.bootstrap, timeout=30)
    # Both coordinators' topics exist before the first transactional request (Kafka creates them
    # asynchronously and answers COORDINATOR_NOT_AVAILABLE until then).
    for key_type, key in ((1, "warm-up"), (0, "warm-up")):
        settled(lambda kt=key_type, k=key: w.call(FindCoordinatorRequest(key_type=kt, coordinator_keys=[k]),
                                                  FindCoordinatorResponse, 4).coordinators[0].error_code)
    yield w
    w.close()


def writable(wire: Wire, topic: str, partitions: int = 1) -> str:
    """Kafka answers NOT_LEADER_OR_FOLLOWER for a moment after creating a topic: wait that out."""
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])
    deadline = time.monotonic() + 20
    while any(p.error_code for p in wire.call(req, ListOffsetsResponse, 7).topics[0].partitions):
        assert time.monotonic() < deadline, f"{topic} has no leader"
        time.sleep(0.1)
    return topic


def ready(wire: Wire, transactional_id: str | None = None, timeout_ms: int = 60_000) -> Txn:
    txn = Txn(wire, transactional_id, timeout_ms)
    assert settled(txn.init) == 0
    return txn


def test_requests_from_a_stranger(wire, make_topic):
    topic = writable(wire, make_topic(partitions=1))
    stranger = Txn(wire)
    stranger.pid, stranger.epoch = 4242, 0
    assert stranger.end(True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert stranger.add(topic) == {(topic, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert stranger.add_offsets("g") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert stranger.produce(topic, [b"x"]).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert latest(wire, topic, READ_UNCOMMITTED) == 0


def test_timeouts_and_empty_commit(wire):
    assert Txn(wire, timeout_ms=0).init() == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert Txn(wire, timeout_ms=900_001).init() == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert ready(wire).end(True) == ErrorCode.INVALID_TXN_STATE


def test_partition_checks(wire, make_topic):
    topic = writable(wire, make_topic(partitions=2), 2)
    txn = ready(wire)
    assert txn.add(topic, 0, 7) == {(topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                    (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert txn.add(topic, 0) == {(topic, 0): 0}
    assert txn.produce(topic, [b"not added"], partition=1).error_code == ErrorCode.INVALID_TXN_STATE
    assert txn.produce(topic, [b"added"], partition=0).error_code == 0
    assert latest(wire, topic, READ_COMMITTED) == 0
    assert settled(lambda: txn.end(False)) == 0
    time.sleep(0.5)  # Kafka writes its markers after answering
    assert txn.produce(topic, [b"after abort"], partition=0).error_code == ErrorCode.INVALID_TXN_STATE
    assert settled(lambda: txn.end(True)) == ErrorCode.INVALID_TXN_STATE


def verify_only(wire: Wire, asked: list[tuple[Txn, str, list[int]]]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v4 as a partition leader sends it (KIP-890 part 1): batched, VerifyOnly."""
    request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id=txn.id, producer_id=txn.pid, producer_epoch=txn.epoch, verify_only=True,
        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])
        for txn, topic, partitions in asked])
    answer = wire.call(request, AddPartitionsToTxnResponse, 4)
    assert answer.error_code == 0
    return {(r.transactional_id, p.partition_index): p.partition_error_code
            for r in answer.results_by_transaction for t in r.topic_results for p in t.results_by_partition}


def test_broker_verify_only_form(wire, make_topic):
    """What a leader's verification learns from the coordinator: each partition in the Ongoing
    transaction verifies, others are TRANSACTION_ABORTABLE; a stale epoch, an unknown producer and an
    unknown partition are refused per transaction."""
    topic = writable(wire, make_topic(partitions=2), 2)
    txn, stranger = ready(wire), Txn(wire)
    stranger.pid, stranger.epoch = 4242, 0
    assert txn.add(topic, 0) == {(topic, 0): 0}
    assert verify_only(wire, [(txn, topic, [0, 1]), (stranger, topic, [0])]) == {
        (txn.id, 0): 0, (txn.id, 1): ErrorCode.TRANSACTION_ABORTABLE,
        (stranger.id, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert verify_only(wire, [(txn, topic, [0, 9])]) == {
        (txn.id, 0): ErrorCode.OPERATION_NOT_ATTEMPTED, (txn.id, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    txn.epoch += 1
    assert verify_only(wire, [(txn, topic, [0])]) == {(txn.id, 0): ErrorCode.PRODUCER_FENCED}
    txn.epoch -= 1
    assert settled(lambda: txn.end(False)) == 0
    assert settled(lambda: verify_only(wire, [(txn, topic, [0])])[(txn.id, 0)]) == ErrorCode.TRANSACTION_ABORTABLE


def test_offsets_need_add_offsets_and_a_valid_member(wire, make_topic, client_versions):
    topic = writable(wire, make_topic(partitions=1))
    group = f"g-{uuid.uuid4().hex[:6]}"
    txn = ready(wire)
    not_added = ErrorCode.TRANSACTION_ABORTABLE if client_versions["commit_offsets"] >= 4 else ErrorCode.INVALID_TXN_STATE
    assert txn.commit_offsets(group, topic, 5) == not_added
    assert txn.add_offsets(group) == 0
    assert txn.commit_offsets(group, topic, 5, member="ghost") == 0  # Empty group, no generation
    assert txn.commit_offsets(group, topic, 5, generation=3) == ErrorCode.UNKNOWN_MEMBER_ID
    assert txn.commit_offsets("", topic, 5) == ErrorCode.INVALID_GROUP_ID


@pytest.mark.parametrize(("version", "code"), [(1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)])
def test_fenced_instance(wire, make_topic, version, code):
    topic = writable(wire, make_topic(partitions=1))
    old = ready(wire)
    assert old.add(topic) == {(topic, 0): 0}
    assert old.produce(topic, [b"zombie"]).error_code == 0
    new = ready(wire, old.id)
    assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)
    assert old.add(topic, version=version) == {(topic, 0): code}
    assert old.end(True, version=version) == code
    assert old.produce(topic, [b"late"]).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert latest(wire, topic, READ_COMMITTED) == latest(wire, topic, READ_UNCOMMITTED)


def end_v5(txn: Txn, commit: bool, epoch: int) -> tuple[int, int, int]:
    """EndTxn v5 (transaction version 2): (error, producer id, producer epoch) of the answer."""
    answer = txn.wire.call(EndTxnRequest(transactional_id=txn.id, producer_id=txn.pid, producer_epoch=epoch,
                                         committed=commit), EndTxnResponse, 5)
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def produce_v12(txn: Txn, topic: str, value: bytes, epoch: int, seq: int) -> int:
    """Produce v12: the leader adds the partition to the transaction itself (no AddPartitionsToTxn)."""
    batch = build_batch([Record(0, 0, None, value)], producer_id=txn.pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=True)
    request = ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return int(txn.wire.call(request, ProduceResponse, 12).responses[0].partition_responses[0].error_code)


def test_transaction_version_2_epoch_bumps_and_retries(wire, make_topic, client_versions, target):
    """KIP-890 part 2 on the wire: Produce 12 adds its partition, every EndTxn 5 bumps the epoch and
    names it, a retry (the epoch one below) gets the same answer, the same epoch after a completed
    transaction starts the next one (an empty abort is allowed, a commit is not), stale and future
    epochs are fenced, and TxnOffsetCommit 5 adds the group's partition itself."""
    if client_versions is LEGACY_VERSIONS or target == "kafka-3.9":
        pytest.skip("transaction version 2: Kafka 4.3.1 and grete, once")
    topic = writable(wire, make_topic(partitions=1))
    txn = ready(wire)
    e = txn.epoch
    assert settled(lambda: produce_v12(txn, topic, b"tv2", e, 0)) == 0
    assert latest(wire, topic, READ_COMMITTED) == 0
    assert settled(lambda: end_v5(txn, True, e)[0]) == 0
    # A retry (Kafka answers CONCURRENT_TRANSACTIONS while its markers are on their way): the same answer.
    assert settled(lambda: end_v5(txn, True, e)[0]) == 0
    assert end_v5(txn, True, e) == (0, txn.pid, e + 1)
    assert end_v5(txn, False, e)[0] == ErrorCode.INVALID_TXN_STATE  # a retry that changed its mind
    assert end_v5(txn, True, e + 1)[0] == ErrorCode.INVALID_TXN_STATE  # nothing added since
    assert end_v5(txn, True, e + 5)[0] == ErrorCode.PRODUCER_FENCED
    assert settled(lambda: end_v5(txn, False, e + 1)[0]) == 0  # an empty abort still bumps
    assert settled(lambda: end_v5(txn, False, e + 1)[0]) == 0
    assert end_v5(txn, False, e + 1) == (0, txn.pid, e + 2)
    assert settled(lambda: produce_v12(txn, topic, b"stale", e + 1, 0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    group = f"g-{uuid.uuid4().hex[:6]}"
    txn.epoch = e + 2
    txn.versions = {**txn.versions, "commit_offsets": 5}
    assert settled(lambda: txn.commit_offsets(group, topic, 1)) == 0  # no AddOffsetsToTxn needed
    assert settled(lambda: end_v5(txn, True, e + 2)[0]) == 0
    deadline = time.monotonic() + 20
    while (state := describe(wire, txn.id)).transaction_state == "PrepareCommit" and time.monotonic() < deadline:
        time.sleep(0.1)  # Kafka completes after its markers
    assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", e + 3)
    assert latest(wire, topic, READ_COMMITTED) == latest(wire, topic, READ_UNCOMMITTED)


def test_transaction_version_feature(wire, client_versions, target):
    """What makes a 4.x client use transaction version 2: the finalized feature in ApiVersions v3+.
    A v3 answer leaves out supported features whose minimum is 0 (older clients reject them);
    v4 lists transaction.version 0-2."""
    if client_versions is LEGACY_VERSIONS or target == "kafka-3.9":
        pytest.skip("transaction version 2: Kafka 4.3.1 and grete, once")
    for version in (3, 4):
        answer = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                           ApiVersionsResponse, version)
        supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
        finalized = {f.name: f.max_version_level for f in answer.finalized_features}
        assert supported.get("transaction.version") == (None if version == 3 else (0, 2))
        assert finalized["transaction.version"] == 2
        assert answer.finalized_features_epoch >= 0
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert (ranges[24][1], ranges[26][1], ranges[27][1], ranges[28][1]) == (5, 5, 2, 5)
