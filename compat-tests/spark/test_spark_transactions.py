"""kafka.isolation.level=read_committed over transactional data written by confluent-kafka.

Three transactions (commit 5, abort 3, commit 4) put data at offsets 0-4, 6-8 and 10-13 with a
commit/abort marker after each (offsets 5, 9, 14). read_committed must see only the committed 9;
read_uncommitted sees the aborted 3 as well; markers are never records. An open transaction holds
the last stable offset back: read_committed reads stop there, and the rest arrives after the commit.
Needs the broker's transaction coordinator (InitProducerId with a transactional.id, AddPartitions,
EndTxn, WriteTxnMarkers, ListOffsets/Fetch at the LSO).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import drain_available_now, read_batch, read_topic

pytestmark = pytest.mark.slow

TXN_TIMEOUT = 30.0


def txn_producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-tx-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5})
    p.init_transactions(TXN_TIMEOUT)
    return p


def transaction(p: Any, topic: str, vals: list[str], commit: bool | None) -> None:
    """Produce ``vals`` in a new transaction; commit, abort, or (None) leave it open."""
    p.begin_transaction()
    for v in vals:
        p.produce(topic, value=v.encode(), partition=0)
    assert p.flush(TXN_TIMEOUT) == 0
    if commit is True:
        p.commit_transaction(TXN_TIMEOUT)
    elif commit is False:
        p.abort_transaction(TXN_TIMEOUT)


COMMITTED_1 = [f"c1-{i}" for i in range(5)]
ABORTED = [f"a-{i}" for i in range(3)]
COMMITTED_2 = [f"c2-{i}" for i in range(4)]
OPEN = [f"o-{i}" for i in range(3)]


def batch_values(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[tuple[int, str]]:
    df = read_batch(spark, bootstrap, topic, **{"kafka.isolation.level": isolation})
    return [(r.offset, bytes(r.value).decode()) for r in df.orderBy("offset").collect()]


def test_read_committed_skips_aborted_and_open_transactions(spark: Any, broker: Any, fresh_topic: str,
                                                            make_topic: Callable[..., str], tmp_path: Path) -> None:
    p = txn_producer(broker.bootstrap)
    transaction(p, fresh_topic, COMMITTED_1, commit=True)
    transaction(p, fresh_topic, ABORTED, commit=False)
    transaction(p, fresh_topic, COMMITTED_2, commit=True)

    committed = list(zip(range(0, 5), COMMITTED_1, strict=True)) + list(zip(range(10, 14), COMMITTED_2, strict=True))
    assert batch_values(spark, broker.bootstrap, fresh_topic, "read_committed") == committed
    everything = sorted(committed + list(zip(range(6, 9), ABORTED, strict=True)))
    assert batch_values(spark, broker.bootstrap, fresh_topic, "read_uncommitted") == everything

    # An open transaction: "latest" for read_committed is the last stable offset (14 is its start).
    transaction(p, fresh_topic, OPEN, commit=None)
    assert batch_values(spark, broker.bootstrap, fresh_topic, "read_committed") == committed
    out, ckpt = make_topic(prefix="out"), str(tmp_path / "ckpt")
    opts = {"kafka.isolation.level": "read_committed"}
    assert drain_available_now(spark, broker.bootstrap, fresh_topic, ckpt, out, **opts) is None
    assert [m.value().decode() for m in read_topic(broker.bootstrap, out)] == COMMITTED_1 + COMMITTED_2

    p.commit_transaction(TXN_TIMEOUT)
    assert drain_available_now(spark, broker.bootstrap, fresh_topic, ckpt, out, **opts) is None
    assert [m.value().decode() for m in read_topic(broker.bootstrap, out)] == COMMITTED_1 + COMMITTED_2 + OPEN
