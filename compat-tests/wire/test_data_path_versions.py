"""Fetch 13+ (topic ids), Produce 13 (topic ids), ListOffsets 8-11 and Metadata 13 on the wire, as
Apache Kafka 4.3.1 answers them. Run against grete (default) and --target=kafka-4; the versions
asked for here are Kafka 4's, so the Kafka 3.9 target skips."""

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
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.batch import iter_batches  # noqa: E402
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402
from grete.testing.routed_wire import open_wire  # noqa: E402
from tests.broker._txn import READ_COMMITTED, Txn, latest, settled  # noqa: E402

# Kafka 4.3.1's ApiVersions for the data path (measured with tools/reference_kafka.py).
KAFKA_43 = {0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13)}


@pytest.fixture
def wire(broker):
    if broker.kind.startswith("kafka-3"):
        pytest.skip("Kafka 4's versions")
    w = open_wire(broker.bootstrap, timeout=30)
    yield w
    w.close()


def topic_id(wire: Wire, topic: str) -> uuid.UUID:
    """The topic's id, once it has a leader everywhere (Kafka needs a moment after creating it)."""
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    deadline = time.monotonic() + 20
    while True:
        t = wire.call(req, MetadataResponse, 12).topics[0]
        if t.error_code == 0 and t.partitions and all(p.error_code == 0 and p.leader_id >= 0 for p in t.partitions):
            return t.topic_id
        assert time.monotonic() < deadline, f"{topic} has no leader"
        time.sleep(0.1)


def produce_by_id(wire: Wire, tid: uuid.UUID, records: bytes, version: int = 13) -> ProduceResponse:
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        topic_id=tid, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    return wire.call(req, ProduceResponse, version)


def fetch_by_id(wire: Wire, tid: uuid.UUID, offset: int = 0, version: int = 13, session_id: int = 0,
                epoch: int = -1) -> FetchResponse:
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id, session_epoch=epoch,
                       topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=[FetchRequest.FetchPartition(
                           partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return wire.call(req, FetchResponse, version)


def test_api_versions_of_the_data_path(wire):
    versions = {k.api_key: (k.min_version, k.max_version)
                for k in wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                   ApiVersionsResponse, 3).api_keys}
    # Kafka 4 dropped the versions below its baselines; grete keeps serving them (old clients).
    assert {k: versions[k][1] for k in KAFKA_43} == {k: v[1] for k, v in KAFKA_43.items()}


@pytest.mark.parametrize("version", [13, 15, 16, 17, 18])
def test_produce_and_fetch_by_topic_id(wire, make_topic, version):
    tid = topic_id(wire, make_topic(partitions=1))
    answer = produce_by_id(wire, tid, build_batch([Record(0, 0, None, b"a"), Record(1, 0, None, b"b")]))
    topic = answer.responses[0]
    assert (topic.topic_id, topic.partition_responses[0].error_code, topic.partition_responses[0].base_offset) == (
        tid, 0, 0)
    fetched = fetch_by_id(wire, tid, version=version)
    assert fetched.error_code == 0 and fetched.responses[0].topic_id == tid
    data = fetched.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark) == (0, 2)
    assert [b.base_offset for b in iter_batches(bytes(data.records))] == [0]


def test_unknown_topic_ids(wire):
    stranger = uuid.uuid4()
    fetched = fetch_by_id(wire, stranger)
    assert fetched.error_code == 0
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in fetched.responses] == [
        (stranger, [ErrorCode.UNKNOWN_TOPIC_ID])]
    produced = produce_by_id(wire, stranger, build_batch([Record(0, 0, None, b"a")]))
    assert [(t.topic_id, [p.error_code for p in t.partition_responses]) for t in produced.responses] == [
        (stranger, [ErrorCode.UNKNOWN_TOPIC_ID])]


def test_a_session_keeps_to_topic_ids_or_names(wire, make_topic):
    name = make_topic(partitions=1)
    tid = topic_id(wire, name)
    deadline = time.monotonic() + 20  # Kafka's replica may answer an error for a moment after creation
    while fetch_by_id(wire, tid).responses[0].partitions[0].error_code:
        assert time.monotonic() < deadline, "the new topic never became fetchable"
        time.sleep(0.1)
    by_id = fetch_by_id(wire, tid, epoch=0)
    assert by_id.error_code == 0 and by_id.session_id != 0
    # An incremental fetch by id: nothing new, nothing answered.
    idle = fetch_by_id(wire, tid, session_id=by_id.session_id, epoch=1)
    assert (idle.error_code, idle.responses) == (0, [])
    # The same session asked with a version that names topics: Kafka's FETCH_SESSION_TOPIC_ID_ERROR.
    by_name = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=by_id.session_id,
                           session_epoch=2, topics=[])
    wrong = wire.call(by_name, FetchResponse, 12)
    assert (wrong.error_code, wrong.session_id) == (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, 0)


def list_offsets(wire: Wire, topic: str, timestamp: int, version: int = 11) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
    return wire.call(req, ListOffsetsResponse, version).topics[0].partitions[0]


def test_list_offsets_special_timestamps(wire, make_topic):
    name = make_topic(partitions=1)
    tid = topic_id(wire, name)
    base = int(time.time() * 1000)
    records = [Record(i, delta, None, b"v") for i, delta in enumerate((100, 400, 200))]
    produce_by_id(wire, tid, build_batch(records, base_timestamp=base))
    found = {ts: (p.error_code, p.offset, p.timestamp, p.leader_epoch) for ts in (-1, -2, -3, -4, -5, -6)
             for p in [list_offsets(wire, name, ts)]}
    assert found[-1] == (0, 3, -1, 0)  # latest
    assert found[-2] == (0, 0, -1, 0)  # earliest
    assert found[-3] == (0, 1, base + 400, 0)  # the record with the largest timestamp inside the batch
    assert found[-4] == (0, 0, -1, 0)  # earliest local: the earliest, without tiered storage
    assert found[-5] == (0, -1, -1, -1)  # latest tiered: none without tiered storage
    assert found[-6] == (0, -1, -1, -1)  # earliest pending upload: none either
    # Each special timestamp only from the version that introduced it.
    refused = [list_offsets(wire, name, ts, version).error_code for ts, version in ((-4, 7), (-5, 8), (-6, 10))]
    assert refused == [ErrorCode.UNSUPPORTED_VERSION] * 3


def test_metadata_13_top_level_error_code(wire, make_topic):
    name = make_topic(partitions=1)
    answer = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]),
                       MetadataResponse, 13)
    assert answer.error_code == 0 and answer.topics[0].name == name


def txn_produce(wire: Wire, txn: Txn, topic: str, version: int) -> int:
    batch = build_batch([Record(0, 0, None, b"t")], producer_id=txn.pid, producer_epoch=txn.epoch,
                        base_sequence=txn.seq.get((topic, 0), 0), transactional=True)
    req = ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    code = int(wire.call(req, ProduceResponse, version).responses[0].partition_responses[0].error_code)
    if code == 0:
        txn.seq[(topic, 0)] = txn.seq.get((topic, 0), 0) + 1
    return code


def test_produce_12_adds_its_partition_to_the_transaction(wire, make_topic):
    """Kafka's ADD_PARTITION operation from Produce v12: the batch joins its producer's transaction
    instead of being refused for a partition AddPartitionsToTxn never named: INVALID_TXN_STATE up
    to v10, TRANSACTION_ABORTABLE at v11."""
    for key_type in (1, 0):  # both coordinators' topics exist before the first transactional request
        settled(lambda kt=key_type: wire.call(FindCoordinatorRequest(key_type=kt, coordinator_keys=["warm-up"]),
                                              FindCoordinatorResponse, 4).coordinators[0].error_code)
    topic = make_topic(partitions=1)
    topic_id(wire, topic)
    txn = Txn(wire)
    assert settled(txn.init) == 0
    assert txn_produce(wire, txn, topic, 10) == ErrorCode.INVALID_TXN_STATE
    assert txn_produce(wire, txn, topic, 11) == ErrorCode.TRANSACTION_ABORTABLE
    assert txn_produce(wire, txn, topic, 12) == 0
    assert settled(lambda: txn.end(True)) == 0
    deadline = time.monotonic() + 20
    while latest(wire, topic, READ_COMMITTED) != 2:  # the record and the commit marker
        assert time.monotonic() < deadline, "the transaction's records never became stable"
        time.sleep(0.1)


def test_a_fetch_older_than_v4_closes_the_connection(broker, make_topic):
    """Kafka 4 removed Fetch v0-3 (KIP-896) and closes a connection that sends one; so do grete's single
    node and KRaft brokers (a ZooKeeper cluster's serve them: compat-tests/cluster/test_cluster_old_versions.py)."""
    if broker.kind.startswith("kafka-3"):
        pytest.skip("Kafka 4's versions")
    topic = make_topic()
    host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
    wire = Wire(host, int(port), timeout=10)
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    try:
        with pytest.raises((ConnectionError, EOFError, OSError)):
            wire.call(request, FetchResponse, 3)
    finally:
        wire.close()
