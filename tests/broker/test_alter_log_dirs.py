"""AlterReplicaLogDirs moves a partition between this broker's log dirs while it keeps serving;
DescribeLogDirs shows the future replica during the move and the partition in its new dir after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.record import Record, build_batch
from grete.testing import broker
from grete.testing._wire import Wire


def _produce(wire: Wire, value: bytes) -> int:
    batch = build_batch([Record(0, 0, None, value)], base_timestamp=1_000)
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(batch))])])
    answer = wire.call(request, ProduceResponse, 9).responses[0].partition_responses[0]
    assert answer.error_code == 0
    return int(answer.base_offset)


def _values(wire: Wire) -> list[int]:
    offsets: list[int] = []
    while True:
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
                               topics=[FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                                   partition=0, fetch_offset=len(offsets), partition_max_bytes=8 << 20)])])
        data = wire.call(request, FetchResponse, 12).responses[0].partitions[0]
        found = [b.base_offset for b in iter_batches(bytes(data.records or b""))]
        if not found:
            return offsets
        offsets.extend(found)


def _move(wire: Wire, path: str, topic: str = "t", partition: int = 0) -> int:
    request = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
        path=path, topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic, partitions=[partition])])])
    result = wire.call(request, AlterReplicaLogDirsResponse, 2).results[0].partitions[0]
    return int(result.error_code)


def _where(wire: Wire) -> dict[str, list[tuple[str, int, bool]]]:
    answer = wire.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, 4)
    return {r.log_dir: [(t.name, p.partition_index, p.is_future_key) for t in r.topics for p in t.partitions]
            for r in answer.results}


def test_a_partition_moves_to_another_dir_and_keeps_its_records(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with broker({"log.dirs": f"{a},{b}", "log.segment.bytes": str(256 * 1024)}, data_dir=a) as running:
        running.create_topic("t", 1)
        source = running.broker.partitions[("t", 0)].log_dir
        target = b if os.path.abspath(source) == os.path.abspath(a) else a
        wire = Wire(running.host, running.port)
        written = [_produce(wire, os.urandom(20_000)) for _ in range(200)]
        assert _move(wire, str(target)) == ErrorCode.NONE
        written += [_produce(wire, b"during the move") for _ in range(20)]
        deadline = time.monotonic() + 30
        while running.broker.partitions[("t", 0)].log_dir != target:
            assert time.monotonic() < deadline, "the move did not finish"
            time.sleep(0.05)
        written.append(_produce(wire, b"after the move"))
        assert _values(wire) == written
        where = _where(wire)
        assert where[os.path.abspath(target)] == [("t", 0, False)]
        assert ("t", 0, False) not in where[os.path.abspath(source)]
        assert not (Path(source) / "t-0").exists()
        assert _move(wire, str(tmp_path / "elsewhere")) == ErrorCode.LOG_DIR_NOT_FOUND
        assert _move(wire, str(source), topic="no-such-topic") == ErrorCode.REPLICA_NOT_AVAILABLE
        wire.close()


@pytest.mark.slow
def test_a_move_copies_no_faster_than_replica_alter_log_dirs_io_max_bytes_per_second(tmp_path: Path) -> None:
    """The quota's first windows let a burst through (11 windows of a second), then the rate holds;
    a loaded machine only copies slower. Raised, the move finishes."""
    a, b = tmp_path / "a", tmp_path / "b"
    rate = 100_000
    limited = {"log.dirs": f"{a},{b}", "replica.alter.log.dirs.io.max.bytes.per.second": str(rate)}
    with broker(limited, data_dir=a) as running:
        running.create_topic("t", 1)
        source = running.broker.partitions[("t", 0)].log_dir
        target = b if os.path.abspath(source) == os.path.abspath(a) else a
        wire = Wire(running.host, running.port)
        for _ in range(200):
            _produce(wire, os.urandom(20_000))  # 4 MB
        assert _move(wire, str(target)) == ErrorCode.NONE
        began = time.monotonic()
        time.sleep(3)
        future = running.broker.log_manager.get_future_log("t", 0)
        assert future is not None, "the whole partition moved: the quota did nothing"
        elapsed = time.monotonic() - began
        assert future.size_bytes < rate * (10 + elapsed) + (1 << 20)
        admin = AdminClient({"bootstrap.servers": f"{running.host}:{running.port}"})
        raised = ConfigResource(ResourceType.BROKER, str(running.broker.node_id), incremental_configs=[ConfigEntry(
            "replica.alter.log.dirs.io.max.bytes.per.second", str(1 << 40),
            incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([raised])[raised].result(30)
        deadline = time.monotonic() + 30
        while running.broker.partitions[("t", 0)].log_dir != target:
            assert time.monotonic() < deadline, "the move did not finish"
            time.sleep(0.05)
        wire.close()
