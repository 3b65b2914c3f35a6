"""A full disk under one of two log dirs, against the reference Kafka and grete alike: the error a
producer gets on the full dir, that its connection goes on, what Metadata says of the partition,
and that the other dir keeps taking writes (docs/storage.md, "What the broker does with it")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.testing import broker as grete_broker  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402
from grete.testing.cluster import cluster  # noqa: E402
from tools.reference_kafka import ReferenceKafka  # noqa: E402


@pytest.fixture
def small_disk() -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount for a small tmpfs")
    mnt = Path(tempfile.mkdtemp(prefix="full-dir-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


@pytest.fixture
def two_dir_broker(target: str, small_disk: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    first = tmp_path / "first"
    first.mkdir()
    dirs = f"{first},{small_disk}"
    if target == "grete":
        with grete_broker({"log.dirs": dirs}, data_dir=first) as b:
            yield b.bootstrap_servers, small_disk
        return
    if target == "grete-kraft":  # broker 1 of a cluster of its own has the two dirs
        with cluster(3, directory=tmp_path / "cluster", controllers=1, broker_overrides={1: {"log.dirs": dirs}}) as nodes:
            yield nodes.bootstrap_servers, small_disk
        return
    with ReferenceKafka(target.removeprefix("kafka-"), overrides={"log.dirs": dirs}) as ref:
        yield ref.bootstrap, small_disk


def _produce(wire: Wire, topic: str, index: int, value: bytes) -> int:
    batch = build_batch([Record(0, 0, None, value)], base_timestamp=int(time.time() * 1000))
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=index, records=bytes(batch))])])
    return int(wire.call(request, ProduceResponse, 9).responses[0].partition_responses[0].error_code)


def _partition_on(wire: Wire, topic: str, log_dir: Path) -> int:
    answer = wire.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, 4)
    for result in answer.results:
        if os.path.realpath(result.log_dir) == os.path.realpath(log_dir):
            found = [p.partition_index for t in result.topics if t.name == topic for p in t.partitions]
            assert found, f"no partition of {topic} in {log_dir}"
            return found[0]
    raise AssertionError(f"{log_dir} not described")


def test_a_full_log_dir(two_dir_broker: tuple[str, Path]) -> None:
    bootstrap, small = two_dir_broker
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    wire = Wire(host, int(port), timeout=30)
    C = CreateTopicsRequest
    # On a cluster the partitions are placed on the first broker, the one with the two dirs.
    topic = (C.CreatableTopic(name="full", num_partitions=4, replication_factor=1) if "," not in bootstrap else
             C.CreatableTopic(name="full", num_partitions=-1, replication_factor=-1, assignments=[
                 C.CreatableReplicaAssignment(partition_index=i, broker_ids=[1]) for i in range(4)]))
    create = C(topics=[topic], timeout_ms=30_000)
    assert wire.call(create, CreateTopicsResponse, 5).topics[0].error_code == 0
    deadline = time.monotonic() + 30
    while _produce(wire, "full", 0, b"warm") != 0:  # the reference creates partitions asynchronously
        assert time.monotonic() < deadline
        time.sleep(0.2)
    on_small = _partition_on(wire, "full", small)
    elsewhere = next(i for i in range(4) if i != on_small and _produce(wire, "full", i, b"x") == 0)
    value = os.urandom(128 * 1024)
    codes: list[int] = []
    for _ in range(100):  # 12.5 MB into 4 MB
        code = _produce(wire, "full", on_small, value)
        codes.append(code)
        if code:
            break
    observed: dict[str, Any] = {"first_error": ErrorCode(codes[-1]).name}
    # The same connection goes on; the partition keeps answering with an error; the other dir works.
    time.sleep(2)  # the reference moves leadership away through its controller
    observed["then"] = ErrorCode(_produce(wire, "full", on_small, b"x")).name
    observed["elsewhere"] = ErrorCode(_produce(wire, "full", elsewhere, value)).name
    meta = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="full")]), MetadataResponse, 9)
    p = next(p for p in meta.topics[0].partitions if p.partition_index == on_small)
    observed["metadata"] = (ErrorCode(p.error_code).name, p.leader_id, len(p.offline_replicas))
    dirs = wire.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, 4).results
    observed["dir"] = next(ErrorCode(r.error_code).name for r in dirs
                           if os.path.realpath(r.log_dir) == os.path.realpath(small))
    wire.close()
    print("observed", observed)
    # What Kafka 4.3.1 and 3.9.2 (one KRaft node) answered, measured with this test.
    assert observed == {"first_error": "KAFKA_STORAGE_ERROR", "then": "KAFKA_STORAGE_ERROR", "elsewhere": "NONE",
                        "metadata": ("LEADER_NOT_AVAILABLE", -1, 1), "dir": "KAFKA_STORAGE_ERROR"}
