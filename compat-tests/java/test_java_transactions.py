"""Java kafka-clients (3.9 and 4.x) transactions: zombie fencing, abort, the last stable offset, and
consume-transform-produce with sendOffsetsToTransaction(offsets, consumer.groupMetadata()).
Driver modes txn, txn-fence, txn-ctp, txn-lso, txn-read (tools/java/TxnScenarios.java)."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.compat

# initTransactions blocks up to max.block.ms when there is no transaction coordinator (default 60 s).
BLOCK = "max.block.ms=30000"


def txn_id(prefix: str = "jtx") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read(java_client, topic: str, isolation: str, settle_ms: int = 1000) -> tuple[list[str], int]:
    """(values, final position) of partition 0 at an isolation level."""
    lines = java_client.ok("txn-read", topic, isolation, str(settle_ms))
    values = [str(x["value"]) for x in lines if "value" in x]
    (position,) = [int(x["position"]) for x in lines if "position" in x]  # type: ignore[call-overload]
    return values, position


def test_second_producer_fences_the_first(java_client, make_topic) -> None:
    topic = make_topic()
    (result,) = java_client.ok("txn-fence", topic, txn_id("zombie"))
    # Kafka's documented answer to a zombie is ProducerFencedException (PRODUCER_FENCED); the
    # 4.x client surfaces the newer epoch-bump path as InvalidProducerEpochException in some orders.
    assert result["zombie_error"] in ("ProducerFencedException", "InvalidProducerEpochException"), result
    committed, _ = read(java_client, topic, "read_committed")
    assert committed == ["from-fresh"]
    everything, _ = read(java_client, topic, "read_uncommitted")
    assert "from-zombie" in everything and "from-fresh" in everything
    assert "zombie-again" not in committed


def test_aborted_transactions_are_invisible(java_client, make_topic) -> None:
    topic = make_topic()
    steps = java_client.ok("txn", topic, txn_id(), "a3,a2", BLOCK)
    assert [s["step"] for s in steps] == ["a3", "a2"]
    committed, position = read(java_client, topic, "read_committed")
    assert committed == []
    # Nothing to deliver, but the consumer moves past the aborted data and both markers.
    assert position == 7
    everything, _ = read(java_client, topic, "read_uncommitted")
    assert everything == [f"v{i}-{topic}" for i in range(5)]


def test_end_offsets_stop_at_the_last_stable_offset(java_client, make_topic) -> None:
    topic = make_topic()
    java_client.ok("produce", topic, "2")  # offsets 0, 1 (one partition, so key hashing does not matter)
    open_, done = java_client.ok("txn-lso", topic, txn_id(), "3", BLOCK)
    assert open_ == {"phase": "open", "read_uncommitted": 5, "read_committed": 2}
    assert done == {"phase": "committed", "read_uncommitted": 6, "read_committed": 6}


def test_send_offsets_to_transaction_with_group_metadata(java_client, make_topic) -> None:
    src, dst = make_topic(), make_topic()
    n = 8
    java_client.ok("produce", src, str(n))
    group = f"jctp-{uuid.uuid4().hex[:8]}"
    aborted, committed = java_client.ok("txn-ctp", src, dst, group, txn_id(), str(n), "a,c", BLOCK,
                                        timeout=180)
    # After the abort the group has no offset; the second consumer re-reads all n and commits n.
    assert aborted == {"step": "a", "read": n, "committed": None}
    assert committed == {"step": "c", "read": n, "committed": n}
    out, _ = read(java_client, dst, "read_committed")
    assert out == [f"out-v{i}-{src}" for i in range(n)]
    everything, _ = read(java_client, dst, "read_uncommitted")
    assert len(everything) == 2 * n


def test_transaction_version_2_bumps_the_epoch_at_every_end(java_client, make_topic, broker) -> None:
    """A 4.x client finds the finalized transaction.version 2 and uses KIP-890 part 2: each commit or
    abort bumps the producer epoch (EndTxn v5 hands the client the new one); a 3.9 client stays on
    transaction version 1, whose epoch moves only at InitProducerId, and so does every client against
    Kafka 3.9.2, which does not finalize transaction version 2."""
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from grete.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
    from grete.testing._wire import Wire, call
    from tests.broker._txn import describe

    topic = make_topic()
    transactional_id = txn_id("tv2")
    steps = java_client.ok("txn", topic, transactional_id, "c2,a1,c1", BLOCK)
    assert [s["step"] for s in steps] == ["c2", "a1", "c1"]
    committed, _ = read(java_client, topic, "read_committed")
    assert committed == [f"v{i}-{topic}" for i in (0, 1, 3)]
    # Asked of the transaction coordinator (in a cluster, not necessarily the first bootstrap address).
    host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
    found = call(host, int(port), FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 3)
    wire = Wire(found.host, found.port)
    try:
        state = describe(wire, transactional_id)
    finally:
        wire.close()
    assert state.error_code == 0 and state.transaction_state == "CompleteCommit"
    tv2 = java_client.version.startswith("4") and not broker.kind.startswith("kafka-3")
    assert state.producer_epoch == (3 if tv2 else 0)


def test_a_transaction_whose_first_record_is_refused_aborts(java_client, make_topic) -> None:
    """Kafka adds the partition to the transaction before it validates the records (KIP-890's
    verification), so the abort that follows a refused first record ends a transaction that began;
    the producer goes on to commit the next one."""
    topic = make_topic(config={"cleanup.policy": "compact"})
    (result,) = java_client.ok("txn-refused", topic, txn_id(), BLOCK)
    assert result == {"first_error": "InvalidRecordException", "second": "committed"}, result
    committed, position = read(java_client, topic, "read_committed")
    assert committed == ["after"]
    assert position == 3  # the abort's marker, the record, the commit's marker
