"""The transaction coordinator on the wire: Kafka's error codes for requests out of order, fencing,
markers, read_committed visibility, transactional offsets, time-outs and restarts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from grete.testing import broker
from grete.testing._wire import Wire
from tests.broker._txn import READ_COMMITTED, READ_UNCOMMITTED, Txn, describe, fetch, latest, visible_values
from tools.testwait import wait_until


@pytest.fixture
def wire(grete_broker):
    w = Wire(grete_broker.host, grete_broker.port)
    yield w
    w.close()


# ---------------------------------------------------------------- requests out of order, bad input

def test_find_coordinator_for_a_transactional_id_creates_the_state_topic(grete_broker, wire):
    resp = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-a"]), FindCoordinatorResponse, 4)
    assert resp.coordinators[0].error_code == 0
    assert resp.coordinators[0].node_id == grete_broker.broker.node_id
    assert ("__transaction_state", 0) in grete_broker.broker.partitions
    # An empty transactional id has a coordinator too, as on Kafka (InitProducerId refuses the id).
    empty = wire.call(FindCoordinatorRequest(key_type=1, key=""), FindCoordinatorResponse, 3)
    assert (empty.error_code, empty.node_id) == (ErrorCode.NONE, grete_broker.broker.node_id)


def test_requests_without_init_producer_id_are_refused(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    stranger = Txn(wire)
    stranger.pid, stranger.epoch = 4242, 0
    assert stranger.end(True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert stranger.add(topic_name) == {(topic_name, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert stranger.add_offsets("g") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # A transactional write from a producer no coordinator knows never reaches the log.
    assert stranger.produce(topic_name, [b"x"]).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert latest(wire, topic_name, READ_UNCOMMITTED) == 0


def test_init_producer_id_validates_the_timeout(wire):
    assert Txn(wire, timeout_ms=0).init() == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert Txn(wire, timeout_ms=900_001).init() == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert Txn(wire, timeout_ms=900_000).init() == ErrorCode.NONE


def test_end_txn_with_nothing_added_is_an_invalid_state(wire):
    txn = Txn(wire)
    assert txn.init() == 0
    assert txn.end(True) == ErrorCode.INVALID_TXN_STATE


def test_unknown_partition_fails_the_whole_add(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    txn = Txn(wire)
    txn.init()
    req = AddPartitionsToTxnRequest(v3_and_below_transactional_id=txn.id, v3_and_below_producer_id=txn.pid,
                                    v3_and_below_producer_epoch=txn.epoch, v3_and_below_topics=[
                                        AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic_name,
                                                                                          partitions=[0, 7])])
    resp = wire.call(req, AddPartitionsToTxnResponse, 3)
    codes = {p.partition_index: p.partition_error_code for p in resp.results_by_topic_v3_and_below[0].results_by_partition}
    assert codes == {0: ErrorCode.OPERATION_NOT_ATTEMPTED, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # Nothing was added: a write to partition 0 is not part of any transaction.
    assert txn.produce(topic_name, [b"x"]).error_code == ErrorCode.INVALID_TXN_STATE


def test_write_to_a_partition_not_added_is_rejected(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name, partitions=2)
    txn = Txn(wire)
    txn.init()
    assert txn.add(topic_name, 0) == {(topic_name, 0): 0}
    assert txn.produce(topic_name, [b"ok"], partition=0).error_code == 0
    assert txn.produce(topic_name, [b"no"], partition=1).error_code == ErrorCode.INVALID_TXN_STATE


# ------------------------------------------------------------------------------------ fencing

@pytest.mark.parametrize(("version", "code"), [(1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)])
def test_a_new_instance_fences_the_old_one(wire, topic_name, grete_broker, version, code):
    grete_broker.create_topic(topic_name)
    old = Txn(wire)
    old.init()
    old.add(topic_name)
    assert old.produce(topic_name, [b"zombie"]).error_code == 0
    new = Txn(wire, old.id)
    assert new.init() == 0
    assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)  # one bump to abort, one for the new instance
    assert old.add(topic_name, version=version) == {(topic_name, 0): code}
    assert old.end(True, version=version) == code
    # The zombie's open transaction was aborted, and its late writes are refused.
    assert old.produce(topic_name, [b"late"]).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert visible_values(wire, topic_name) == []
    assert latest(wire, topic_name, READ_COMMITTED) == latest(wire, topic_name, READ_UNCOMMITTED)


def test_write_after_abort_cannot_open_a_hanging_transaction(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    txn = Txn(wire)
    txn.init()
    txn.add(topic_name)
    txn.produce(topic_name, [b"a"])
    assert txn.end(False) == 0
    assert txn.produce(topic_name, [b"late"]).error_code == ErrorCode.INVALID_TXN_STATE
    assert latest(wire, topic_name, READ_COMMITTED) == latest(wire, topic_name, READ_UNCOMMITTED)


# ------------------------------------------------------------------------- commit and abort

def test_commit_makes_records_visible_and_abort_hides_them(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    txn = Txn(wire)
    txn.init()
    txn.add(topic_name)
    txn.produce(topic_name, [b"c1", b"c2"])
    assert latest(wire, topic_name, READ_COMMITTED) == 0  # the open transaction pins the LSO
    assert latest(wire, topic_name, READ_UNCOMMITTED) == 2
    assert visible_values(wire, topic_name) == []
    assert txn.end(True) == 0
    assert txn.end(True) == 0  # a retried commit is answered the same
    assert txn.end(False) == ErrorCode.INVALID_TXN_STATE
    assert visible_values(wire, topic_name) == [b"c1", b"c2"]
    txn.add(topic_name)
    txn.produce(topic_name, [b"a1"])
    assert txn.end(False) == 0
    txn.add(topic_name)
    txn.produce(topic_name, [b"c3"])
    assert txn.end(True) == 0
    assert visible_values(wire, topic_name) == [b"c1", b"c2", b"c3"]
    part = fetch(wire, topic_name, READ_COMMITTED)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(txn.pid, 3)]
    assert part.last_stable_offset == part.high_watermark == 7  # 4 records + 3 markers


def test_transactional_offsets_apply_only_on_commit(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    group = f"g-{uuid.uuid4().hex[:6]}"
    txn = Txn(wire)
    txn.init()
    assert txn.commit_offsets(group, topic_name, 5) == ErrorCode.INVALID_TXN_STATE  # no AddOffsetsToTxn yet
    assert txn.add_offsets(group) == 0
    assert txn.commit_offsets(group, topic_name, 5) == 0

    def committed(require_stable: bool) -> tuple[int, int]:
        req = OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic_name, partition_indexes=[0])])
        p = wire.call(req, OffsetFetchResponse, 7).topics[0].partitions[0]
        return p.committed_offset, p.error_code

    assert committed(False) == (-1, 0)
    assert committed(True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    assert txn.end(False) == 0
    assert committed(True) == (-1, 0)
    txn.add_offsets(group)
    txn.commit_offsets(group, topic_name, 9)
    assert txn.end(True) == 0
    assert committed(True) == (9, 0)


def test_txn_offset_commit_checks_the_member_and_generation(wire, topic_name, grete_broker):
    """Codes as Apache Kafka 3.9.2 and 4.3.1 answer them (measured with this same raw client)."""
    grete_broker.create_topic(topic_name)
    txn = Txn(wire)
    txn.init()
    txn.add_offsets("fresh-group")
    # An Empty group accepts a commit that names no generation, whatever the member id.
    assert txn.commit_offsets("fresh-group", topic_name, 1, member="ghost") == 0
    # Naming a generation makes the member id count: there is no such member.
    assert txn.commit_offsets("fresh-group", topic_name, 1, generation=3) == ErrorCode.UNKNOWN_MEMBER_ID
    assert txn.commit_offsets("", topic_name, 1) == ErrorCode.INVALID_GROUP_ID


# ----------------------------------------------------------------------------- time-outs, admin

@pytest.mark.grete_overrides({"transaction.max.timeout.ms": "60000"})
def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    txn = Txn(wire, timeout_ms=300)
    txn.init()
    txn.add(topic_name)
    txn.produce(topic_name, [b"slow"])
    wait_until(lambda: describe(wire, txn.id).transaction_state == "CompleteAbort", timeout=10)
    assert describe(wire, txn.id).producer_epoch == txn.epoch + 1
    assert txn.end(True) == ErrorCode.PRODUCER_FENCED
    assert visible_values(wire, topic_name) == []
    assert latest(wire, topic_name, READ_COMMITTED) == latest(wire, topic_name, READ_UNCOMMITTED)


def test_describe_and_list_transactions_and_producers(wire, topic_name, grete_broker):
    grete_broker.create_topic(topic_name)
    txn = Txn(wire)
    txn.init()
    txn.add(topic_name)
    txn.produce(topic_name, [b"x"])
    state = describe(wire, txn.id)
    assert (state.error_code, state.transaction_state, state.producer_id) == (0, "Ongoing", txn.pid)
    assert [(t.topic, t.partitions) for t in state.topics] == [(topic_name, [0])]
    assert state.transaction_start_time_ms > 0
    assert describe(wire, "nobody").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    listed = wire.call(ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[]),
                       ListTransactionsResponse, 1)
    assert listed.unknown_state_filters == ["Bogus"]
    assert txn.id in [t.transactional_id for t in listed.transaction_states]
    by_pattern = wire.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                   transactional_id_pattern=txn.id[:6] + ".*"),
                           ListTransactionsResponse, 2)
    assert txn.id in [t.transactional_id for t in by_pattern.transaction_states]

    producers = wire.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic_name, partition_indexes=[0, 5])]), DescribeProducersResponse, 0).topics[0].partitions
    assert producers[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (active,) = producers[0].active_producers
    assert (active.producer_id, active.current_txn_start_offset, active.last_sequence) == (txn.pid, 0, 0)
    txn.end(True)
    assert describe(wire, txn.id).transaction_state == "CompleteCommit"


# ------------------------------------------------------------------------------------ restarts

def test_state_survives_a_restart_and_an_open_transaction_can_still_commit(tmp_path: Path):
    topic = "restarted"
    with broker(data_dir=tmp_path, topics={topic: 1}) as first:
        w = Wire(first.host, first.port)
        txn = Txn(w)
        txn.init()
        txn.add(topic)
        txn.produce(topic, [b"before"])
        w.close()
    with broker(data_dir=tmp_path) as second:
        w = Wire(second.host, second.port)
        txn.wire = w
        assert describe(w, txn.id).transaction_state == "Ongoing"
        assert latest(w, topic, READ_COMMITTED) == 0
        assert txn.end(True) == 0
        assert visible_values(w, topic) == [b"before"]
        again = Txn(w, txn.id)
        assert again.init() == 0 and again.pid == txn.pid and again.epoch == txn.epoch + 1
        w.close()


def test_a_commit_interrupted_after_prepare_is_finished_on_start(tmp_path: Path):
    """A crash between writing PrepareCommit and the markers: the next start writes them."""
    from grete.coordinator.transactions.txn_format import TxnState, encode_key, encode_value

    topic = "interrupted"
    with broker(data_dir=tmp_path, topics={topic: 1}) as first:
        w = Wire(first.host, first.port)
        txn = Txn(w)
        txn.init()
        txn.add(topic)
        txn.produce(topic, [b"prepared"])
        coordinator = first.broker.txn_coordinator
        meta = coordinator.txns[txn.id]
        prepared = meta.transit(TxnState.PREPARE_COMMIT, int(time.time() * 1000))
        first.call(lambda: coordinator.store.append(coordinator.partition_for(txn.id), encode_key(txn.id),
                                                    encode_value(prepared.to_log())))
        w.close()
    with broker(data_dir=tmp_path) as second:
        w = Wire(second.host, second.port)
        assert describe(w, txn.id).transaction_state == "CompleteCommit"
        assert visible_values(w, topic) == [b"prepared"]
        w.close()


def test_committed_state_survives_a_crash_with_a_stale_high_watermark_checkpoint(tmp_path: Path):
    """After a crash the replication-offset-checkpoint lags the log. A single replica's high watermark
    must still be its log end, or the coordinators load only part of their topics: transactional
    offsets and transaction states written after the last checkpoint would be lost (found by the
    exactly-once checker in tests/eos with SIGKILLed brokers)."""
    topic = "crashed"
    group = "g-crash"
    with broker(data_dir=tmp_path, topics={topic: 1}) as first:
        w = Wire(first.host, first.port)
        txn = Txn(w)
        txn.init()
        txn.add(topic)
        txn.produce(topic, [b"kept"])
        txn.add_offsets(group)
        assert txn.commit_offsets(group, topic, 7) == 0
        assert txn.end(True) == 0
        w.close()
    # What a SIGKILL leaves: every checkpointed high watermark at 0 and no clean-shutdown marker.
    checkpoint = tmp_path / "replication-offset-checkpoint"
    lines = checkpoint.read_text().splitlines()
    checkpoint.write_text("\n".join(lines[:2] + [" ".join(ln.split()[:2] + ["0"]) for ln in lines[2:]]) + "\n")
    (tmp_path / ".kafka_cleanshutdown").unlink(missing_ok=True)
    with broker(data_dir=tmp_path) as second:
        w = Wire(second.host, second.port)
        assert describe(w, txn.id).transaction_state == "CompleteCommit"
        assert visible_values(w, topic) == [b"kept"]
        req = OffsetFetchRequest(group_id=group, require_stable=True, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
        assert w.call(req, OffsetFetchResponse, 7).topics[0].partitions[0].committed_offset == 7
        again = Txn(w, txn.id)
        assert again.init() == 0 and (again.pid, again.epoch) == (txn.pid, txn.epoch + 1)
        w.close()
