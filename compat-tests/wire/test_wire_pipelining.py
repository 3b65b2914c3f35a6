"""Requests pipelined on one connection take effect in their order, the same raw requests against
grete and Apache Kafka: a broker answers a request before it handles the next one from that
connection (Kafka mutes the channel), so an OffsetFetch sent right behind an OffsetCommit, in the
same write, sees the commit. A client that commits asynchronously and then asks for its committed
offsets (Java's ``commitAsync`` then ``committed``) relies on it."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from grete.testing._wire import Wire  # noqa: E402

ROUNDS = 10
COMMIT_VERSION, FETCH_VERSION = 8, 7  # versions both pinned Kafkas serve, with group ids in one list
LOADING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def coordinator(wire: Wire, group: str, topic: str) -> Wire:
    """A connection to ``group``'s coordinator, once it takes a commit (a fresh broker creates and
    loads the offsets partition first)."""
    deadline = time.monotonic() + 60
    while True:
        found = wire.call(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 3)
        if found.error_code == ErrorCode.NONE:
            coord = Wire(found.host, found.port, timeout=30)
            answer = coord.call(commit(group, topic, 0), OffsetCommitResponse, COMMIT_VERSION)
            error = answer.topics[0].partitions[0].error_code
            if error == ErrorCode.NONE:
                return coord
            coord.close()
            assert error in LOADING, f"a first commit answered {error}"
        assert time.monotonic() < deadline, f"no coordinator for {group}: {found.error_code}"
        time.sleep(0.2)


def commit(group: str, topic: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])])


def committed(group: str, topic: str) -> OffsetFetchRequest:
    return OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])


def test_an_offset_fetch_behind_an_offset_commit_sees_it(wire: Wire, make_topic: Any) -> None:
    topic = make_topic(partitions=1)
    group = f"pipelined-{uuid.uuid4().hex[:10]}"
    coord = coordinator(wire, group, topic)
    try:
        seen = []
        for offset in range(10, 10 * (ROUNDS + 1), 10):
            coord.send_together([(commit(group, topic, offset), COMMIT_VERSION),
                                 (committed(group, topic), FETCH_VERSION)])
            answer = coord.receive(OffsetCommitResponse, COMMIT_VERSION)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
            fetched = coord.receive(OffsetFetchResponse, FETCH_VERSION)
            seen.append(fetched.topics[0].partitions[0].committed_offset)
        assert seen == list(range(10, 10 * (ROUNDS + 1), 10))
    finally:
        coord.close()
