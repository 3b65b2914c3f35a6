"""sarama transactions: commit, abort, commit; read_committed vs read_uncommitted; marker offsets."""

from __future__ import annotations

import uuid

from tools.client_drivers import check_consume_transform_produce


def test_sarama_transactions_commit_abort_commit(sarama_client, make_topic):
    topic = make_topic(partitions=1)
    steps = {x["step"]: x["offsets"] for x in sarama_client.ok("txn", topic=topic, txid=f"srt-{uuid.uuid4().hex[:8]}")}
    # Each transaction's marker takes one offset after its records.
    assert steps == {"commit1": [0, 1, 2], "abort": [4, 5, 6], "commit2": [8, 9, 10]}
    committed = [x for x in sarama_client.ok("consume", topic=topic, count=6, isolation="committed") if "value" in x]
    assert [(x["offset"], x["value"]) for x in committed] == \
        [(i, f"commit1-{i}") for i in range(3)] + [(8 + i, f"commit2-{i}") for i in range(3)]
    everything = [x for x in sarama_client.ok("consume", topic=topic, count=9) if "value" in x]
    assert [x["value"] for x in everything] == \
        [f"{s}-{i}" for s in ("commit1", "abort", "commit2") for i in range(3)]


def test_sarama_consume_transform_produce(sarama_client, broker, make_topic, produce):
    source, out = make_topic(partitions=1), make_topic(partitions=1)
    produce(source, [(None, f"v{i}".encode()) for i in range(10)], partition=0)
    group = f"srctp-{uuid.uuid4().hex[:8]}"
    lines = sarama_client.ok("ctp", **{"in": source, "out": out, "group": group,
                                       "txid": f"srx-{uuid.uuid4().hex[:8]}", "count": 10})
    # The offsets went with the consumer's generation (KIP-447), not the "no generation" -1.
    assert all(x["generation"] >= 1 for x in lines if "step" in x), lines
    check_consume_transform_produce(lines, broker.bootstrap, produce, source, out, group, 10)
