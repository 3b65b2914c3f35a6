"""``__transaction_state`` in Kafka's format, both directions.

* ``kafka-dump-log --transaction-log-decoder`` decodes the state records grete's coordinator wrote.
* grete's decoder reads the state records Apache Kafka's coordinator wrote (3.9: value version 0;
  4.x may write version 1, the flexible one).

Needs Java and Kafka's jars (``python -m tools.kafka_dist fetch``); skipped without them.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.coordinator.transactions.txn_format import TxnState, decode_key, decode_value  # noqa: E402
from grete.protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse  # noqa: E402
from grete.protocol.records.record import decode_records  # noqa: E402
from grete.storage import Log, LogConfig  # noqa: E402
from grete.testing import _wire, broker  # noqa: E402
from tools import kafka_dist  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.compat]
# Kafka 3.9 in the long tier (by hand, -m long): the default run keeps to its time budget.
VERSIONS = [pytest.param("3.9", marks=pytest.mark.long), "4"]


def _need_kafka(version: str) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.fetch(version)
    except Exception as exc:
        pytest.skip(f"Kafka {version} jars unavailable: {exc}")


def _transact(bootstrap: str, topic: str, txn_id: str) -> None:
    """One aborted and one committed transaction, the second with a consumer group's offsets."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"aborted", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"committed", partition=0)
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{txn_id}"})
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], c.consumer_group_metadata(), 30)
    c.close()
    p.commit_transaction(30)
    _await_complete_commit(bootstrap, txn_id)


def _await_complete_commit(bootstrap: str, txn_id: str, timeout: float = 30.0) -> None:
    """commit_transaction returns once the commit is decided (PrepareCommit written); the markers and
    CompleteCommit follow. Until the coordinator (the one node) says CompleteCommit, as a reader of
    the state log must wait before stopping the broker."""
    host, _, port = bootstrap.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        answer = _wire.call(host, int(port), DescribeTransactionsRequest(transactional_ids=[txn_id]),
                            DescribeTransactionsResponse, 0)
        if answer.transaction_states and answer.transaction_states[0].transaction_state == "CompleteCommit":
            return
        assert time.monotonic() < deadline, f"{txn_id} not CompleteCommit after {timeout} s: {answer}"
        time.sleep(0.05)


def _states(partition_dir: Path) -> list[tuple[str, object]]:
    log = Log.open(partition_dir, LogConfig(cleanup_policy="compact"), clean_shutdown=False)
    try:
        return [(decode_key(r.key), decode_value(r.value) if r.value is not None else None)
                for b in log.batches() if not b.is_control for r in decode_records(b) if r.key is not None]
    finally:
        log.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_dump_log_decodes_grete_transaction_state(tmp_path: Path, version: str) -> None:
    _need_kafka(version)
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    with broker(data_dir=tmp_path) as running:
        _transact(running.bootstrap_servers, "dumped", txn_id)
        producer_id = running.broker.txn_coordinator.txns[txn_id].producer_id
    segment = tmp_path / "__transaction_state-0" / "00000000000000000000.log"
    out = kafka_dist.run_tool(version, "kafka-dump-log", "--files", str(segment), "--transaction-log-decoder",
                              "--print-data-log", timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert txn_id in text and str(producer_id) in text
    assert "Unknown" not in text and "Exception" not in text
    # Kafka 3.9 prints state names, 4.x the JSON of the record (transactionStatus 4 = CompleteCommit).
    assert "CompleteCommit" in text or '"transactionStatus":4' in text, text[-2000:]
    assert "CompleteAbort" in text or '"transactionStatus":5' in text, text[-2000:]


@pytest.mark.parametrize("version", VERSIONS)
def test_grete_decodes_kafka_transaction_state(tmp_path: Path, version: str) -> None:
    _need_kafka(version)
    from tools.reference_kafka import ReferenceKafka

    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    with ReferenceKafka(version, log_level="WARN") as kafka:
        _transact(kafka.bootstrap, "decoded", txn_id)
        dirs = sorted(kafka.log_dir.glob("__transaction_state-*"))
        if kafka.proc is not None:
            kafka.proc.terminate()
            kafka.proc.wait(60)
        for d in dirs:
            shutil.copytree(d, tmp_path / d.name)
    records = [rec for d in sorted(tmp_path.iterdir()) for rec in _states(d)]
    mine = [value for key, value in records if key == txn_id]
    assert mine, "Kafka wrote no state for the transactional id"
    states = [v.state for v in mine if v is not None]
    assert TxnState.ONGOING in states and TxnState.PREPARE_COMMIT in states
    assert states[-1] is TxnState.COMPLETE_COMMIT
    ongoing = next(v for v in mine if v is not None and v.state is TxnState.ONGOING and v.partitions)
    assert ("decoded", 0) in ongoing.partitions


def test_kafka_dump_log_decodes_grete_transaction_version_2_state(tmp_path: Path) -> None:
    """A transaction version 2 transaction (Produce 12 adds the partition, EndTxn 5 bumps the epoch)
    is written as TransactionLogValue v1 with ClientTransactionVersion 2; Kafka 4's decoder reads it."""
    _need_kafka("4")
    from grete.protocol.messages import EndTxnRequest, EndTxnResponse, ProduceRequest, ProduceResponse
    from grete.protocol.records.record import Record, build_batch
    from grete.testing._wire import Wire
    from tests.broker._txn import Txn, settled

    with broker(data_dir=tmp_path) as running:
        running.create_topic("tv2", 1)
        host, port = running.bootstrap_servers.rsplit(":", 1)
        wire = Wire(host, int(port))
        txn = Txn(wire)
        assert settled(txn.init) == 0
        batch = build_batch([Record(0, 0, None, b"v")], producer_id=txn.pid, producer_epoch=txn.epoch,
                            base_sequence=0, transactional=True)
        produced = wire.call(ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name="tv2", partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])]), ProduceResponse, 12)
        assert produced.responses[0].partition_responses[0].error_code == 0
        ended = wire.call(EndTxnRequest(transactional_id=txn.id, producer_id=txn.pid, producer_epoch=txn.epoch,
                                        committed=True), EndTxnResponse, 5)
        assert (ended.error_code, ended.producer_epoch) == (0, txn.epoch + 1)
        wire.close()
    segment = tmp_path / "__transaction_state-0" / "00000000000000000000.log"
    states = [v for k, v in _states(segment.parent) if k == txn.id and v is not None]
    assert [v.client_transaction_version for v in states if v.state is not TxnState.EMPTY] == [2, 2, 2]
    out = kafka_dist.run_tool("4", "kafka-dump-log", "--files", str(segment), "--transaction-log-decoder",
                              "--print-data-log", timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert txn.id in text and "Unknown" not in text and "Exception" not in text
    assert '"transactionStatus":4' in text and '"clientTransactionVersion":2' in text, text[-2000:]
