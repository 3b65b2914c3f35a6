"""On-disk compatibility with Apache Kafka, both directions.

* Kafka's own ``kafka-dump-log`` reads a partition directory grete wrote: batches, indexes
  (``--verify-index-only``), time index, producer snapshot, aborted-transaction index.
* grete opens a partition directory Apache Kafka wrote (clean and as if after a crash) and reads
  back exactly what was produced, with Kafka's producer state, epochs and topic id.

Needs Java and Kafka's jars (``python -m tools.kafka_dist fetch``); skipped without them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.records.record import absolute_records  # noqa: E402
from grete.storage import Log, LogConfig  # noqa: E402
from grete.storage.cleaner import clean_log  # noqa: E402
from grete.storage.files import read_partition_metadata  # noqa: E402
from grete.storage.producer_state import read_snapshot  # noqa: E402
from tests.storage._batches import append, marker  # noqa: E402
from tools import kafka_dist  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.compat]
# Kafka 3.9 in the long tier (by hand, -m long): the default run keeps to its time budget.
VERSIONS = [pytest.param("3.9", marks=pytest.mark.long), "4"]
N_IDEMPOTENT = 2500  # ~2.5 MB: three 1 MiB segments (Kafka 4 refuses smaller segment.bytes)


def _need_kafka(version: str) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.fetch(version)
    except Exception as exc:  # no network, no mvn: nothing to compare with
        pytest.skip(f"Kafka {version} jars unavailable: {exc}")


def dump(version: str, *args: str) -> str:
    done = kafka_dist.run_tool(version, "kafka-dump-log", *args, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def grete_partition(root: Path) -> tuple[Path, list[tuple[int, bytes | None, bytes | None]]]:
    """A grete log with several segments, all codecs, idempotent and transactional producers,
    an aborted transaction and one compaction pass (gaps, an emptied producer batch)."""
    d = root / "orders-0"
    cfg = LogConfig(segment_bytes=4000, index_interval_bytes=300, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.0)
    log = Log.open(d, cfg, topic_id=uuid.uuid4(), clean_shutdown=True)
    for i in range(60):
        append(log, [f"v{i}-{j}".encode() * 5 for j in range(3)], [f"k{(i * 3 + j) % 40}".encode() for j in range(3)],
               compression=i % 5, leader_epoch=i // 20)
    append(log, [b"txn"], [b"tk"], producer_id=11, epoch=0, seq=0, transactional=True)
    marker(log, 11, 0, commit=False)
    append(log, [b"idem0"], [b"ik"], producer_id=12, epoch=2, seq=0)
    append(log, [b"idem1"], [b"ik"], producer_id=12, epoch=2, seq=1)
    append(log, [b"later"], [b"ik"])  # supersedes producer 12's last batch: it must stay, empty
    log.roll()
    assert clean_log(log, 0, 10**13, force=True) is not None
    expected = [(r.offset, r.key, r.value) for b in log.batches() if not b.is_control for r in absolute_records(b)]
    log.close()
    return d, expected


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_dump_log_reads_grete_files(tmp_path: Path, version: str) -> None:
    _need_kafka(version)
    d, expected = grete_partition(tmp_path)
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 3
    files = ",".join(str(p) for p in logs)

    verify = dump(version, "--files", files, "--verify-index-only")
    assert not re.search(r"mismatch|out of order|corrupt", verify, re.I), verify[-3000:]

    deep = dump(version, "--files", files, "--deep-iteration", "--print-data-log")
    assert "isvalid: false" not in deep
    got = []
    for m in re.finditer(r"\| offset: (\d+) .*?keySize: (-?\d+) valueSize: (-?\d+).*?(?:payload: (.*))?$", deep, re.M):
        if "endTxnMarker" in m.group(0):
            continue
        got.append((int(m.group(1)), m.group(4)))
    assert got == [(o, v.decode() if v is not None else None) for o, _, v in expected]
    assert "endTxnMarker: ABORT" in deep
    assert re.search(r"count: 0 baseSequence: 1 lastSequence: 1 producerId: 12 producerEpoch: 2 ", deep)  # compaction kept the empty batch

    snapshot = sorted(d.glob("*.snapshot"))[-1]
    snap = dump(version, "--files", str(snapshot))
    ours = {e.producer_id: e for e in read_snapshot(snapshot)}
    for pid, entry in ours.items():
        line = re.search(rf"producerId: {pid} producerEpoch: (\d+) .*lastSequence: (-?\d+) lastOffset: (-?\d+)", snap)
        assert line is not None, snap
        assert (int(line.group(1)), int(line.group(2)), int(line.group(3))) == \
            (entry.epoch, entry.last_seq, entry.last_offset)

    txn = dump(version, "--files", ",".join(str(p) for p in d.glob("*.txnindex")))
    assert re.search(r"producerId: 11 firstOffset: \d+ lastOffset: \d+", txn), txn

    for idx in sorted(d.glob("*.index")):
        out = dump(version, "--files", str(idx))
        entries = re.findall(r"offset: (\d+) position: (\d+)", out)
        assert all(int(pos) < (idx.with_suffix(".log")).stat().st_size for _, pos in entries)


# --- the other direction: Kafka writes, grete reads ---------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_grete_opens_a_partition_written_by_kafka(tmp_path: Path, version: str) -> None:
    _need_kafka(version)
    from confluent_kafka import Producer

    from tools.kafka_admin import create_topic
    from tools.reference_kafka import ReferenceKafka

    topic = f"disk-{uuid.uuid4().hex[:8]}"
    produced: list[tuple[bytes, bytes]] = []
    aborted: list[bytes] = []
    with ReferenceKafka(version, log_level="WARN") as kafka:
        create_topic(kafka.bootstrap, topic, config={"segment.bytes": "1048576", "index.interval.bytes": "512"})
        p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                      "compression.type": "lz4", "linger.ms": 5})
        for i in range(N_IDEMPOTENT):
            kv = (f"k{i % 17}".encode(), f"value-{i}-".encode() + os.urandom(900 + i % 200))
            p.produce(topic, key=kv[0], value=kv[1], partition=0)
            produced.append(kv)
            if i % 100 == 99:
                p.flush(30)  # many batches, several segments
        p.flush(30)
        t = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}"})
        t.init_transactions(30)
        t.begin_transaction()
        for i in range(5):
            t.produce(topic, key=b"ak", value=f"aborted-{i}".encode(), partition=0)
            aborted.append(f"aborted-{i}".encode())
        t.flush(30)
        t.abort_transaction(30)
        t.begin_transaction()
        t.produce(topic, key=b"ck", value=b"committed", partition=0)
        produced.append((b"ck", b"committed"))
        t.commit_transaction(30)
        src = kafka.log_dir / f"{topic}-0"
        if kafka.proc is not None:  # SIGTERM: Kafka shuts down cleanly (flush, snapshots, marker)
            kafka.proc.terminate()
            kafka.proc.wait(60)
        copy = tmp_path / f"{topic}-0"
        shutil.copytree(src, copy)

    for clean in (True, False):
        work = tmp_path / ("clean" if clean else "crash") / f"{topic}-0"
        shutil.copytree(copy, work)
        log = Log.open(work, LogConfig(segment_bytes=1048576, index_interval_bytes=512), clean_shutdown=clean)
        assert len(log.segments) >= 3
        values = [(r.key, r.value) for b in log.batches() if not b.is_control for r in absolute_records(b)]
        data = [kv for kv in values if kv[1] not in aborted]
        assert data == produced
        assert sum(1 for _, v in values if v in aborted) == len(aborted)
        assert len(log.aborted_transactions(0, log.log_end_offset)) == 1
        assert log.last_stable_offset == log.log_end_offset
        assert read_partition_metadata(work) == log.topic_id is not None
        idem = [e for e in log.producer_state.producers.values() if e.last_seq == N_IDEMPOTENT - 1]
        assert idem, "the idempotent producer's state must be rebuilt"
        for offset in range(0, log.log_end_offset, 13):
            res = log.read(offset, 1)
            assert res.first_offset <= offset
        log.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_broker_serves_a_partition_grete_wrote(tmp_path: Path, version: str) -> None:
    """Stop a Kafka broker, replace one partition's files by grete's, start it again, consume."""
    _need_kafka(version)
    from confluent_kafka import Consumer, TopicPartition

    from tools.kafka_admin import create_topic
    from tools.reference_kafka import ReferenceKafka

    topic = f"ours-{uuid.uuid4().hex[:8]}"
    kafka = ReferenceKafka(version, log_level="WARN").start()
    try:
        create_topic(kafka.bootstrap, topic)
        assert kafka.proc is not None
        kafka.proc.terminate()
        kafka.proc.wait(60)
        part = kafka.log_dir / f"{topic}-0"
        topic_id = read_partition_metadata(part)
        for f in part.iterdir():
            if f.name != "partition.metadata":
                f.unlink()
        log = Log.open(part, LogConfig(segment_bytes=200_000, index_interval_bytes=1024), topic_id=topic_id,
                       clean_shutdown=True)
        expected = []
        for i in range(300):
            res = append(log, [f"m{i}-{j}".encode() + os.urandom(200) for j in range(10)],
                         [f"k{j}".encode() for j in range(10)], compression=i % 5, leader_epoch=0)
            expected.extend(range(res.base_offset, res.last_offset + 1))
        values = [r.value for b in log.batches() for r in absolute_records(b)]
        assert len(log.segments) >= 3
        log.close()
        config = kafka.workdir / "server.properties"  # type: ignore[operator]
        kafka._launch(config)
        kafka._wait_ready(time.monotonic())
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{topic}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            got.append((msg.offset(), msg.value()))
        consumer.close()
        assert [o for o, _ in got] == expected
        assert [v for _, v in got] == values
    finally:
        kafka.stop()
