"""KIP-890 part 1 across brokers: a partition leader that is not the transaction's coordinator asks
the coordinator's broker (AddPartitionsToTxn v4, VerifyOnly) before taking a producer's first
transactional batch, and refuses a batch for a partition the transaction never added (the Jepsen
checker's hanging transaction); a transaction across brokers still commits. And transaction
version 2 (KIP-890 part 2) across brokers: implicit adds through AddPartitionsToTxn v5, markers v2."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster, free_port
from tests.broker._txn import READ_COMMITTED, Txn, describe, fetch, latest, settled, visible_values
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

BROKERS = (1, 2, 3)


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    metrics = {b: {"metrics.listener": f"http://127.0.0.1:{free_port()}"} for b in BROKERS}
    with cluster(3, overrides=CLUSTER_OVERRIDES, broker_overrides=metrics) as running:
        yield running


def verification_metrics(grete_cluster: GreteCluster, broker: int) -> tuple[float, float]:
    """(VerificationTimeMs observations, VerificationFailureRate) on ``broker``'s metrics endpoint."""
    url = grete_cluster.broker_items(broker)["metrics.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        lines = dict(line.rsplit(" ", 1) for line in answer.read().decode().splitlines() if not line.startswith("#"))
    return (float(lines["kafka_server_addpartitionstotxnmanager_verificationtimems_count"]),
            float(lines["kafka_server_addpartitionstotxnmanager_verificationfailurerate_total"]))


@pytest.fixture(scope="module")
def topic(grete_cluster: GreteCluster) -> str:
    """One partition led by each broker: partition p is on broker p + 1 alone."""
    name = f"verify-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, len(BROKERS), replica_assignment=[[b] for b in BROKERS])])[name].result(30)
    for b in BROKERS:
        wait_until(lambda b=b: latest(_wire(grete_cluster, b), name, 0, partition=b - 1) == 0,
                   what=f"{name} on broker {b}")
    return name


def _wire(grete_cluster: GreteCluster, broker: int) -> Wire:
    process = grete_cluster.brokers[broker]
    return Wire(process.host, process.port)


def _coordinator(grete_cluster: GreteCluster, txn_id: str) -> int:
    def found() -> int | None:
        wire = _wire(grete_cluster, 1)
        try:
            answer = wire.call(FindCoordinatorRequest(key=txn_id, key_type=1), FindCoordinatorResponse, 3)
        finally:
            wire.close()
        return int(answer.node_id) if answer.error_code == 0 else None
    return int(wait_until(found, what=f"the coordinator of {txn_id}"))


def _produce(wire: Wire, txn: Txn, topic: str, partition: int, value: bytes, version: int) -> int:
    seq = txn.seq.get((topic, partition), 0)
    batch = build_batch([Record(0, 0, None, value)], producer_id=txn.pid, producer_epoch=txn.epoch,
                        base_sequence=seq, transactional=True)
    request = ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    code = int(wire.call(request, ProduceResponse, version).responses[0].partition_responses[0].error_code)
    if code == 0:
        txn.seq[(topic, partition)] = seq + 1
    return code


def _transaction(grete_cluster: GreteCluster) -> tuple[Txn, int, list[int]]:
    """A transactional producer initialised at its coordinator; the coordinator's id and the
    partitions of the test topic led by the other brokers."""
    txn_id = f"verify-{uuid.uuid4().hex[:8]}"
    coordinator = _coordinator(grete_cluster, txn_id)
    txn = Txn(_wire(grete_cluster, coordinator), txn_id)
    assert settled(txn.init) == 0
    return txn, coordinator, [b - 1 for b in BROKERS if b != coordinator]


@pytest.mark.parametrize("version, refusal", [(9, ErrorCode.INVALID_TXN_STATE),
                                              (11, ErrorCode.TRANSACTION_ABORTABLE)])
def test_a_batch_outside_the_transaction_is_refused_by_a_leader_on_another_broker(
        grete_cluster: GreteCluster, topic: str, version: int, refusal: ErrorCode) -> None:
    txn, _, (added, stranger) = _transaction(grete_cluster)
    assert settled(lambda: max(txn.add(topic, added).values())) == 0
    leader = _wire(grete_cluster, added + 1)
    assert _produce(leader, txn, topic, added, b"in", version) == 0
    elsewhere = _wire(grete_cluster, stranger + 1)
    timed, failed = verification_metrics(grete_cluster, stranger + 1)
    # The partition was never added: its leader asks the coordinator and refuses the batch.
    assert _produce(elsewhere, txn, topic, stranger, b"hanging", version) == refusal
    assert verification_metrics(grete_cluster, stranger + 1) == (timed + 1, failed + 1)  # Kafka's metric names
    assert txn.end(commit=False) == 0
    # Nothing was left open on the refusing leader: its last stable offset is its log end.
    assert latest(elsewhere, topic, 0, stranger) == latest(elsewhere, topic, READ_COMMITTED, stranger)
    # After the abort the added partition is no longer in a transaction either (while the abort's
    # markers are still on their way, the coordinator's CONCURRENT_TRANSACTIONS reaches an old
    # client as the retriable NOT_ENOUGH_REPLICAS, as in Kafka).
    late = wait_until(lambda: (code := _produce(leader, txn, topic, added, b"late", version))
                      != ErrorCode.NOT_ENOUGH_REPLICAS and code, what="the end of the abort")
    assert late == refusal
    for wire in (leader, elsewhere, txn.wire):
        wire.close()


def test_a_transaction_across_brokers_commits(grete_cluster: GreteCluster, topic: str) -> None:
    txn, _, others = _transaction(grete_cluster)
    before = {p: visible_values(_wire(grete_cluster, p + 1), topic, p) for p in others}
    assert settled(lambda: max(txn.add(topic, *others).values())) == 0
    for p in others:
        assert _produce(_wire(grete_cluster, p + 1), txn, topic, p, f"committed-{p}".encode(), 9) == 0
        assert _produce(_wire(grete_cluster, p + 1), txn, topic, p, f"again-{p}".encode(), 9) == 0
    assert settled(lambda: txn.end(commit=True)) == 0
    for p in others:
        wanted = before[p] + [f"committed-{p}".encode(), f"again-{p}".encode()]
        wait_until(lambda p=p, wanted=wanted: visible_values(_wire(grete_cluster, p + 1), topic, p) == wanted,
                   what=f"the committed records on partition {p}")


def test_verify_only_needs_cluster_action_and_answers_per_partition(grete_cluster: GreteCluster, topic: str) -> None:
    """The broker form, as a leader sends it: a partition in the transaction verifies, one outside it
    is TRANSACTION_ABORTABLE, and a stranger's producer id is INVALID_PRODUCER_ID_MAPPING."""
    txn, coordinator, (added, other) = _transaction(grete_cluster)
    assert settled(lambda: max(txn.add(topic, added).values())) == 0
    transactions = [
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=txn.id, producer_id=txn.pid, producer_epoch=txn.epoch, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[added, other])]),
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=f"{txn.id}-none", producer_id=txn.pid, producer_epoch=txn.epoch, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[added])])]
    answer = txn.wire.call(AddPartitionsToTxnRequest(transactions=transactions), AddPartitionsToTxnResponse, 4)
    found = {(r.transactional_id, p.partition_index): p.partition_error_code
             for r in answer.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
    # An id this coordinator serves but never saw, or one another broker serves.
    stranger = (ErrorCode.INVALID_PRODUCER_ID_MAPPING if _coordinator(grete_cluster, f"{txn.id}-none") == coordinator
                else ErrorCode.NOT_COORDINATOR)
    assert answer.error_code == 0
    assert found == {(txn.id, added): 0, (txn.id, other): ErrorCode.TRANSACTION_ABORTABLE,
                     (f"{txn.id}-none", added): stranger}
    assert txn.end(commit=False) == 0
    txn.wire.close()


def test_a_stock_client_transaction_across_brokers(grete_cluster: GreteCluster, topic: str) -> None:
    txn_id = f"stock-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "transactional.id": txn_id})
    producer.init_transactions(30)
    marker = uuid.uuid4().hex[:6]
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=f"stock-{marker}-{p}".encode(), partition=p)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 20
    while len(seen) < 3 and time.monotonic() < deadline:
        seen |= {m.value() for m in consumer.consume(100, 0.5)
                 if m.error() is None and m.value().startswith(f"stock-{marker}".encode())}
    consumer.close()
    assert seen == {f"stock-{marker}-{p}".encode() for p in range(3)}


def test_pipelined_batches_of_a_transaction_are_verified_together(grete_cluster: GreteCluster, topic: str) -> None:
    """One record per batch (librdkafka's batch.num.messages=1): a partition leader reads the batches a
    producer pipelines on one connection before answering the first, and their checks with the
    coordinator are one, so each batch is written, in order, and every transaction commits."""
    txn_id = f"pipelined-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "transactional.id": txn_id,
                         "batch.num.messages": 1, "linger.ms": 0})
    producer.init_transactions(30)
    marker = uuid.uuid4().hex[:6]
    failed: list[str] = []
    for txn in range(3):
        producer.begin_transaction()
        for p in range(len(BROKERS)):
            for i in range(4):
                producer.produce(topic, value=f"{marker}-{txn}-{p}-{i}".encode(), partition=p,
                                 on_delivery=lambda err, _m: failed.append(err.name()) if err else None)
        producer.commit_transaction(30)
    assert failed == []
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(len(BROKERS))])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(seen) < 3 * 4 * len(BROKERS) and time.monotonic() < deadline:
        seen += [m.value() for m in consumer.consume(100, 0.5)
                 if m.error() is None and m.value().startswith(marker.encode())]
    consumer.close()
    assert sorted(seen) == sorted(f"{marker}-{t}-{p}-{i}".encode() for t in range(3) for p in range(len(BROKERS))
                                  for i in range(4))


def _group_coordinated_elsewhere(grete_cluster: GreteCluster, avoid: int) -> tuple[str, int]:
    """A group id whose coordinator is not broker ``avoid``, and that coordinator."""
    for n in range(100):
        group = f"group-{uuid.uuid4().hex[:6]}-{n}"
        def found(group: str = group) -> int | None:
            wire = _wire(grete_cluster, 1)
            try:
                answer = wire.call(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
            finally:
                wire.close()
            return int(answer.node_id) if answer.error_code == 0 else None
        node = int(wait_until(found, what=f"the coordinator of {group}"))
        if node != avoid:
            return group, node
    raise AssertionError("every group landed on one broker")


@pytest.mark.parametrize("version, refusal", [(3, ErrorCode.INVALID_TXN_STATE), (4, ErrorCode.TRANSACTION_ABORTABLE)])
def test_offsets_outside_the_transaction_are_refused_by_a_group_coordinator_on_another_broker(
        grete_cluster: GreteCluster, topic: str, version: int, refusal: ErrorCode) -> None:
    txn, coordinator, _ = _transaction(grete_cluster)
    group, group_coordinator = _group_coordinated_elsewhere(grete_cluster, coordinator)
    at_group = _wire(grete_cluster, group_coordinator)
    txn_wire, txn.wire = txn.wire, at_group
    txn.versions = {**txn.versions, "commit_offsets": version}
    # AddOffsetsToTxn never named the group: its coordinator asks the transaction's and refuses.
    assert settled(lambda: txn.commit_offsets(group, topic, 5)) == refusal
    txn.wire = txn_wire
    assert settled(lambda: txn.add_offsets(group)) == 0
    txn.wire = at_group
    assert settled(lambda: txn.commit_offsets(group, topic, 5)) == 0
    txn.wire = txn_wire
    assert settled(lambda: txn.end(commit=True)) == 0
    for wire in (at_group, txn_wire):
        wire.close()


def _end_v5(txn: Txn, commit: bool, epoch: int) -> tuple[int, int]:
    answer = txn.wire.call(EndTxnRequest(transactional_id=txn.id, producer_id=txn.pid, producer_epoch=epoch,
                                         committed=commit), EndTxnResponse, 5)
    return int(answer.error_code), int(answer.producer_epoch)


def test_transaction_version_2_across_brokers(grete_cluster: GreteCluster, topic: str) -> None:
    """KIP-890 part 2 in a cluster: Produce 12 at a leader other than the coordinator adds its
    partition (AddPartitionsToTxn v5 to the coordinator's broker), TxnOffsetCommit 5 at a group
    coordinator elsewhere adds the group's partition, EndTxn 5 bumps the epoch and the markers (v2,
    with the bumped epoch) commit both; the old epoch is fenced afterwards."""
    txn, coordinator, others = _transaction(grete_cluster)
    e = txn.epoch
    before = {p: visible_values(_wire(grete_cluster, p + 1), topic, p) for p in others}
    for p in others:
        assert settled(lambda p=p: _produce(_wire(grete_cluster, p + 1), txn, topic, p, f"tv2-{p}".encode(), 12)) == 0
    group, group_coordinator = _group_coordinated_elsewhere(grete_cluster, coordinator)
    txn_wire, txn.wire = txn.wire, _wire(grete_cluster, group_coordinator)
    txn.versions = {**txn.versions, "commit_offsets": 5}
    assert settled(lambda: txn.commit_offsets(group, topic, 7)) == 0
    txn.wire = txn_wire
    assert settled(lambda: _end_v5(txn, True, e)[0]) == 0
    assert settled(lambda: _end_v5(txn, True, e)[0]) == 0  # a retry once the markers are written
    assert _end_v5(txn, True, e) == (0, e + 1)
    for p in others:
        wanted = before[p] + [f"tv2-{p}".encode()]
        wait_until(lambda p=p, wanted=wanted: visible_values(_wire(grete_cluster, p + 1), topic, p) == wanted,
                   what=f"the committed record on partition {p}")
    # The ended transaction's epoch no longer writes: its leader knows the bumped one from the marker.
    assert _produce(_wire(grete_cluster, others[0] + 1), txn, topic, others[0], b"stale", 12) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    txn.wire.close()


def _first_batch_elsewhere(grete_cluster: GreteCluster, topic: str,
                           prefix: bytes) -> tuple[Txn, int, Wire, int, bytes, bytearray]:
    """A transaction with a partition added whose leader is not its coordinator: the transaction, the
    partition, a connection to its leader, its log end, and the transaction's first batch for it
    (one record, ``prefix`` and a unique value), which that leader verifies before appending."""
    txn, _, (added, _) = _transaction(grete_cluster)
    assert settled(lambda: max(txn.add(topic, added).values())) == 0
    leader = _wire(grete_cluster, added + 1)
    value = prefix + uuid.uuid4().hex.encode()
    batch = build_batch([Record(0, 0, None, value)], producer_id=txn.pid, producer_epoch=txn.epoch,
                        base_sequence=0, transactional=True)
    return txn, added, leader, latest(leader, topic, 0, added), value, batch


def test_a_parked_batch_is_written_as_it_was_sent(grete_cluster: GreteCluster, topic: str) -> None:
    """A batch parked for verification outlives its request's receive buffer: a request pipelined
    right behind it (here a produce of the same size) must not change the bytes that get written."""
    txn, added, leader, start, value, batch = _first_batch_elsewhere(grete_cluster, topic, b"parked-")
    other = build_batch([Record(0, 0, None, b"x" * len(value))])
    for records, transactional_id in ((batch, txn.id), (other, None)):
        leader.send(ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=added, records=records)])]), 9)
    answers = [leader.receive(ProduceResponse, 9) for _ in range(2)]
    assert [a.responses[0].partition_responses[0].error_code for a in answers] == [0, 0]
    part = fetch(leader, topic, 0, offset=start, partition=added)
    batches = list(iter_batches(bytes(part.records or b"")))
    assert len(batches) == 2 and all(b.compute_crc() == b.crc & 0xFFFFFFFF for b in batches)
    (parked,) = [b for b in batches if b.is_transactional]
    assert [r.value for r in decode_records(parked)] == [value]
    assert txn.end(commit=False) == 0
    leader.close()
    txn.wire.close()


def test_a_request_behind_a_batch_being_verified_waits_for_it(grete_cluster: GreteCluster, topic: str) -> None:
    """A produce parked for its transaction's verification holds its connection, as Kafka's muted
    channel holds every request: a request pipelined behind it, in the same write, is read only once
    the batch is written and answered. Otherwise the producer's next batch could be appended before
    the parked one, between the coordinator's answer and the parked batch's append."""
    txn, added, leader, start, value, batch = _first_batch_elsewhere(grete_cluster, topic, b"held-")
    produce = ProduceRequest(transactional_id=txn.id, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=added, records=batch)])])
    read = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                            partition=added, fetch_offset=start, partition_max_bytes=1 << 20)])])
    leader.send_together([(produce, 9), (read, 12)])
    assert leader.receive(ProduceResponse, 9).responses[0].partition_responses[0].error_code == 0
    part = leader.receive(FetchResponse, 12).responses[0].partitions[0]
    assert [r.value for b in iter_batches(bytes(part.records or b"")) for r in decode_records(b)] == [value]
    assert txn.end(commit=False) == 0
    leader.close()
    txn.wire.close()


def test_java_4_transactions_across_brokers(grete_cluster: GreteCluster, topic: str) -> None:
    """Java kafka-clients 4.3.1 commits and aborts transactions over partitions led by all three
    brokers. A ZooKeeper cluster finalizes no features (as Kafka 3.9 in ZooKeeper mode), so the client
    stays on transaction version 1 (AddPartitionsToTxn, verified produce) and the epoch never moves."""
    import json
    import shutil
    import subprocess

    from tools import kafka_dist

    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.harness_classes(kafka_dist.resolve_version("4"))
    except Exception as exc:
        pytest.skip(f"Java harness unavailable: {exc}")
    txn_id = f"java-{uuid.uuid4().hex[:8]}"
    before = [latest(_wire(grete_cluster, b), topic, 0, b - 1) for b in BROKERS]
    done = subprocess.run(kafka_dist.harness_cmd(kafka_dist.resolve_version("4"), "txn", grete_cluster.bootstrap_servers,
                                                 topic, txn_id, "c3,a2,c3", "max.block.ms=30000"),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in done.stdout.splitlines() if line.startswith("{")]
    assert steps == ["c3", "a2", "c3"]
    after = [latest(_wire(grete_cluster, b), topic, 0, b - 1) for b in BROKERS]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)  # every leader took part
    wire = _wire(grete_cluster, _coordinator(grete_cluster, txn_id))
    state = describe(wire, txn_id)
    wire.close()
    assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", 0)
