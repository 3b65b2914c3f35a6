"""Kafka Connect in distributed mode against the session's single node (grete, or Kafka with
``--target=kafka-4`` / ``kafka-3.9``): FileStreamSource -> topic -> FileStreamSink.

Each test uses a new Connect group with its own internal topics, so every worker start creates the
config, offset and status topics afresh, as on a new cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from cluster_helpers import wait_until
from connect_worker import (
    CONNECT_VERSIONS,
    ConnectGroup,
    FilePipe,
    Worker,
    numbered,
    read_committed,
    running_worker,
)

from tools.kafka_admin import create_topic

LINES = 200


def pipe_on(bootstrap: str, tmp_path: Path, name: str = "file") -> FilePipe:
    topic = f"{name}-{tmp_path.name}"[:200]
    create_topic(bootstrap, topic, 1)
    return FilePipe(topic=topic, source=tmp_path / f"{name}.in", sink=tmp_path / f"{name}.out", name=name)


def assert_moved_once(pipe: FilePipe, bootstrap: str, expected: list[str]) -> None:
    """The topic holds each line once (the source re-read nothing) and so does the sink file."""
    in_topic, sunk = pipe.settled(bootstrap)
    assert in_topic == len(expected), f"{in_topic} records in {pipe.topic} for {len(expected)} lines"
    assert sunk == expected


@pytest.mark.timeout(900)  # two worker starts: 90 s each were seen here under load
@pytest.mark.parametrize("connect_version", CONNECT_VERSIONS)
def test_file_source_to_sink_then_restart(broker, connect_dist, connect_version, tmp_path):
    """N lines move in order; after a SIGTERM and a restart the worker resumes from its stored
    offsets: the M lines appended meanwhile arrive, none twice."""
    pipe = pipe_on(broker.bootstrap, tmp_path)
    first = numbered("line", 0, LINES)
    pipe.append(first)
    worker = Worker(connect_dist(connect_version), ConnectGroup.new(), broker.bootstrap, tmp_path / "connect")
    with running_worker(worker):
        pipe.install(worker)
        assert pipe.await_sunk(LINES, worker) == first
        assert_moved_once(pipe, broker.bootstrap, first)
    more = numbered("line", LINES, LINES // 2)
    pipe.append(more)
    with running_worker(worker):
        assert pipe.await_sunk(len(first + more), worker) == first + more
        assert_moved_once(pipe, broker.bootstrap, first + more)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_two_workers_share_the_connectors_and_hand_them_over(broker, connect_dist, tmp_path):
    """A second worker joins (incremental cooperative rebalance: it takes part of the work), then the
    first stops; every line arrives once, in order."""
    pipe = pipe_on(broker.bootstrap, tmp_path)
    group = ConnectGroup.new(extra={"scheduled.rebalance.max.delay.ms": "1000"})
    dist = connect_dist("4.3.1")
    first = Worker(dist, group, broker.bootstrap, tmp_path / "connect", name="w1")
    second = Worker(dist, group, broker.bootstrap, tmp_path / "connect", name="w2")
    lines = numbered("line", 0, LINES)
    pipe.append(lines)
    with running_worker(first):
        pipe.install(first)
        assert pipe.await_sunk(LINES, first) == lines
        with running_worker(second):
            def spread() -> bool:
                owners = {s["tasks"][0]["worker_id"] for n in ("file-source", "file-sink")
                          if (s := second.running(n)) is not None}
                return owners == {first.worker_id, second.worker_id}
            wait_until(spread, 120, "the two tasks on the two workers", interval=0.5)
            lines += numbered("line", LINES, LINES)
            pipe.append(lines[LINES:])
            assert pipe.await_sunk(len(lines), second) == lines
            first.stop()
            second.await_running("file-source", "file-sink")
            lines += numbered("line", 2 * LINES, LINES)
            pipe.append(lines[2 * LINES:])
            assert pipe.await_sunk(len(lines), second) == lines
            assert_moved_once(pipe, broker.bootstrap, lines)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_exactly_once_source_through_a_restart(broker, connect_dist, tmp_path):
    """KIP-618: a worker with ``exactly.once.source.support=enabled`` writes the source's records and
    its offsets in one transaction per poll; stopped and started again, it resumes from the committed
    offsets. A read_committed reader finds each line once, in order, and the topic holds the
    transactions' markers besides them."""
    pipe = pipe_on(broker.bootstrap, tmp_path, name="eos")
    group = ConnectGroup.new(extra={"exactly.once.source.support": "enabled"})
    worker = Worker(connect_dist("4.3.1"), group, broker.bootstrap, tmp_path / "connect")
    lines = numbered("line", 0, LINES)
    pipe.append(lines)
    with running_worker(worker):
        pipe.install(worker, source={"exactly.once.support": "required", "transaction.boundary": "poll"})
        assert pipe.await_sunk(LINES, worker) == lines
    lines += numbered("line", LINES, LINES // 2)
    pipe.append(lines[LINES:])
    with running_worker(worker):
        assert pipe.await_sunk(len(lines), worker) == lines
    committed, end = read_committed(broker.bootstrap, pipe.topic)
    assert committed == lines
    assert end > len(lines), f"no transaction markers in {pipe.topic}: end offset {end}"


FRESH_STARTS = int(os.environ.get("GRETE_CONNECT_FRESH_STARTS", "10"))


@pytest.mark.long
@pytest.mark.timeout(300 * FRESH_STARTS)
def test_fresh_starts_in_a_row(fresh_broker: Callable[[], AbstractContextManager[str]], connect_dist, tmp_path):
    """A new broker and a new worker, several times: the worker creates its internal topics, reads them
    back and moves lines each time (the herder must not die while it sets its topics up)."""
    dist = connect_dist("4.3.1")
    for start in range(FRESH_STARTS):
        t0 = time.monotonic()
        with fresh_broker() as bootstrap:
            run = tmp_path / f"start-{start}"
            run.mkdir()
            pipe = pipe_on(bootstrap, run)
            lines = numbered(f"start{start}", 0, 20)
            pipe.append(lines)
            worker = Worker(dist, ConnectGroup.new(), bootstrap, run / "connect")
            with running_worker(worker):
                pipe.install(worker)
                assert pipe.await_sunk(len(lines), worker) == lines, f"fresh start {start}"
            print(f"fresh start {start}: worker up and 20 lines moved in {time.monotonic() - t0:.0f}s")
