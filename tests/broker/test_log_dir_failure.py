"""A full disk under one of two log dirs (KIP-112, as Kafka handles it): Produce to its partitions
gets KAFKA_STORAGE_ERROR on a connection that stays open, the other dir keeps serving, Metadata
shows the partition offline, and every acknowledged record is there after more space and a restart."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.record import Record, build_batch
from grete.storage import io
from grete.testing import broker
from grete.testing._wire import Wire


def _thread_cpu_s(tid: int | None) -> float:
    """User + system CPU seconds of one thread of this process (Linux /proc)."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _mount_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if shutil.which("mount") is None:
        return "mount not installed"
    return None


@pytest.fixture
def small_disk() -> Iterator[Path]:
    if (why := _mount_problem()) is not None:
        pytest.skip(why)
    mnt = Path(tempfile.mkdtemp(prefix="grete-full-"))
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


def _produce(wire: Wire, topic: str, index: int, value: bytes) -> ProduceResponse.PartitionProduceResponse:
    batch = build_batch([Record(0, 0, None, value)], base_timestamp=1_000)
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=index, records=bytes(batch))])])
    return wire.call(request, ProduceResponse, 9).responses[0].partition_responses[0]


def _read_all(wire: Wire, topic: str, index: int) -> list[int]:
    offsets: list[int] = []
    while True:
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
                               topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=index, fetch_offset=len(offsets), partition_max_bytes=8 << 20)])])
        data = wire.call(request, FetchResponse, 12).responses[0].partitions[0]
        assert data.error_code == 0
        found = [b.base_offset for b in iter_batches(bytes(data.records or b""))]
        if not found:
            return offsets
        offsets.extend(found)


def test_full_log_dir_answers_storage_error_and_loses_nothing(small_disk: Path, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    dirs = f"{tmp_path / 'a'},{small_disk}"  # the metadata file lives in the first dir
    value = os.urandom(64 * 1024)
    with broker({"log.dirs": dirs, "log.segment.bytes": str(1 << 20)}, data_dir=tmp_path / "a") as b:
        b.create_topic("t", 2)
        on_small = [i for i in (0, 1) if b.broker.partitions[("t", i)].log_dir == small_disk]
        assert len(on_small) == 1, "one partition per dir (the emptiest dir takes the next partition)"
        full, healthy = on_small[0], 1 - on_small[0]
        wire = Wire(b.host, b.port)
        acknowledged = []
        for _ in range(200):  # 200 x 64 KB = 12.5 MB into a 3 MB disk
            answer = _produce(wire, "t", full, value)
            if answer.error_code:
                break
            acknowledged.append(answer.base_offset)
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert 0 < len(acknowledged) < 200
        # The same connection is still served, and the other dir takes writes.
        assert _produce(wire, "t", full, b"x").error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert _produce(wire, "t", healthy, value).error_code == 0
        meta = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]),
                         MetadataResponse, 9).topics[0]
        states = {p.partition_index: (p.error_code, p.leader_id, p.offline_replicas) for p in meta.partitions}
        assert states[full] == (ErrorCode.LEADER_NOT_AVAILABLE, -1, [b.broker.node_id])
        assert states[healthy][0] == 0
        assert small_disk in b.broker.log_manager.offline_dirs
        wire.close()
    # One line naming the dir, no traceback per request.
    assert not [r for r in caplog.records if r.exc_info]
    assert len([r for r in caplog.records if r.levelname == "ERROR" and str(small_disk) in r.getMessage()]) == 1
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    with broker({"log.dirs": dirs, "log.segment.bytes": str(1 << 20)}, data_dir=tmp_path / "a") as b:
        wire = Wire(b.host, b.port)
        assert set(acknowledged) <= set(_read_all(wire, "t", full))
        assert _produce(wire, "t", full, b"again").error_code == 0
        wire.close()


def test_groups_find_no_coordinator_while_its_partition_is_offline(small_disk: Path, tmp_path: Path) -> None:
    """__consumer_offsets on the dir that fills up: FindCoordinator answers COORDINATOR_NOT_AVAILABLE
    (clients back off) instead of a coordinator that cannot write, and no group churns generations."""
    from confluent_kafka import Consumer

    from grete.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

    a = tmp_path / "a"
    overrides = {"log.dirs": f"{a},{small_disk}", "offsets.topic.num.partitions": "1"}
    with broker(overrides, data_dir=a) as b:
        b.create_topic("elsewhere", 1)  # dir a now holds one partition: the offsets topic goes to the tmpfs
        wire = Wire(b.host, b.port)
        found = wire.call(FindCoordinatorRequest(key="g", key_type=0), FindCoordinatorResponse, 3)
        assert found.error_code == 0
        assert b.broker.partitions[("__consumer_offsets", 0)].log_dir == small_disk
        b.create_topic("filler", 2)  # one of them lands on the tmpfs (the emptiest dir, ties to the first)
        filler = next(i for i in (0, 1) if b.broker.partitions[("filler", i)].log_dir == small_disk)
        value = os.urandom(64 * 1024)
        for _ in range(200):
            if _produce(wire, "filler", filler, value).error_code:
                break
        assert small_disk in b.broker.log_manager.offline_dirs
        found = wire.call(FindCoordinatorRequest(key="g", key_type=0), FindCoordinatorResponse, 3)
        assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g",
                             "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
        consumer.subscribe(["elsewhere"])
        cpu_before = _thread_cpu_s(b.thread.native_id)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment() == []
        # Nothing can succeed, and nothing spins: the broker's loop is idle but for the retries.
        assert _thread_cpu_s(b.thread.native_id) - cpu_before < 0.4
        consumer.close()
        groups = b.call(lambda: {g: grp.generation_id for g, grp in b.broker.group_coordinator.groups.items()})
        assert groups.get("g", 0) == 0
        wire.close()


@pytest.mark.parametrize("kind, err", [("write", errno.EIO), ("fsync", errno.EIO), ("write", errno.EROFS)])
def test_an_io_error_under_a_running_broker(tmp_path: Path, kind: str, err: int) -> None:
    """EIO / EROFS from the disk (injected at the storage layer's seam) while the broker runs: the
    dir goes offline once, its partitions answer KAFKA_STORAGE_ERROR, the other dir goes on, and
    what was acknowledged before is there after a restart."""
    a, b_dir = tmp_path / "a", tmp_path / "b"
    dirs = f"{a},{b_dir}"
    with broker({"log.dirs": dirs, "log.flush.interval.messages": "1"}, data_dir=a) as b:
        b.create_topic("t", 2)
        failing = b.broker.partitions[("t", 0)].log_dir
        healthy = next(i for i in (0, 1) if b.broker.partitions[("t", i)].log_dir != failing)
        wire = Wire(b.host, b.port)
        acknowledged = [_produce(wire, "t", 0, b"before").base_offset for _ in range(3)]
        injector = io.inject()
        try:
            injector.fail(failing, kind, err, times=1)
            assert _produce(wire, "t", 0, b"during").error_code == ErrorCode.KAFKA_STORAGE_ERROR
        finally:
            io.reset()
        assert failing in b.broker.log_manager.offline_dirs
        assert _produce(wire, "t", 0, b"after").error_code == ErrorCode.KAFKA_STORAGE_ERROR
        if healthy != 0:
            assert _produce(wire, "t", healthy, b"fine").error_code == 0
        wire.close()
    with broker({"log.dirs": dirs}, data_dir=a) as b:
        wire = Wire(b.host, b.port)
        assert set(acknowledged) <= set(_read_all(wire, "t", 0))
        wire.close()
