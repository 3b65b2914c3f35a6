"""Fetch sessions (KIP-227) on the wire, as Apache Kafka answers them: a session id for a full fetch
with epoch 0, incremental fetches that answer only partitions with news, forgotten partitions, and
the session errors. Run against grete (default) and --target=kafka-4 / kafka-3.9."""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402

V = 12  # names, not topic ids; sessions behave the same from v7


def writable(wire: Wire, topic: str, partitions: int) -> str:
    """Kafka answers NOT_LEADER_OR_FOLLOWER for a moment after creating a topic: wait that out."""
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])
    deadline = time.monotonic() + 20
    while any(p.error_code for p in wire.call(req, ListOffsetsResponse, 7).topics[0].partitions):
        assert time.monotonic() < deadline, f"{topic} has no leader"
        time.sleep(0.1)
    return topic


def produce(wire: Wire, topic: str, partition: int, value: bytes = b"v") -> int:
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([Record(0, 0, None, value)]))])])
    answer = wire.call(req, ProduceResponse, 9).responses[0].partition_responses[0]
    assert answer.error_code == 0
    return int(answer.base_offset)


def part(index: int, offset: int = 0) -> FetchRequest.FetchPartition:
    return FetchRequest.FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)


def fetch(wire: Wire, session_id: int, epoch: int, topics: dict[str, list[FetchRequest.FetchPartition]],
          forgotten: dict[str, list[int]] | None = None, version: int = V) -> FetchResponse:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
                       session_epoch=epoch,
                       topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                       forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                                              for t, ps in (forgotten or {}).items()])
    return wire.call(req, FetchResponse, version)


def answered(response: FetchResponse) -> dict[int, int]:
    """partition -> high watermark, for every partition in the answer (one topic)."""
    return {p.partition_index: p.high_watermark for t in response.responses for p in t.partitions}


def test_incremental_fetches_answer_only_what_changed(wire, make_topic):
    topic = writable(wire, make_topic(partitions=3), 3)
    produce(wire, topic, 0)
    full = fetch(wire, 0, 0, {topic: [part(0, 1), part(1), part(2)]})
    assert full.error_code == 0 and full.session_id != 0
    assert answered(full) == {0: 1, 1: 0, 2: 0}
    sid = full.session_id
    # Nothing changed: the answer is empty, the session goes on.
    idle = fetch(wire, sid, 1, {})
    assert (idle.error_code, idle.session_id, answered(idle)) == (0, sid, {})
    # New data in partition 2 only.
    produce(wire, topic, 2)
    news = fetch(wire, sid, 2, {})
    assert answered(news) == {2: 1}
    # The session still fetches partition 2 from offset 0 (the fetcher did not name it again): its
    # records come back each time until the fetcher moves on.
    assert answered(fetch(wire, sid, 3, {})) == {2: 1}
    assert answered(fetch(wire, sid, 4, {topic: [part(2, 1)]})) == {}
    # Forgotten: partition 1 leaves the session, and its news no longer come back.
    assert answered(fetch(wire, sid, 5, {}, forgotten={topic: [1]})) == {}
    produce(wire, topic, 1)
    assert answered(fetch(wire, sid, 6, {})) == {}
    # Added back by naming it: answered at once (the session knows nothing of it yet).
    assert answered(fetch(wire, sid, 7, {topic: [part(1, 1)]})) == {1: 1}


def test_session_errors(wire, make_topic):
    topic = writable(wire, make_topic(partitions=1), 1)
    sid = fetch(wire, 0, 0, {topic: [part(0)]}).session_id
    assert sid != 0
    wrong_epoch = fetch(wire, sid, 5, {})
    assert (wrong_epoch.error_code, wrong_epoch.session_id, wrong_epoch.responses) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    # The error does not close the session: the right epoch still works.
    assert fetch(wire, sid, 1, {}).error_code == 0
    unknown = fetch(wire, sid ^ 0x5A5A5A, 1, {})
    assert (unknown.error_code, unknown.session_id) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert fetch(wire, 0, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Epoch -1 names the session to close it, and the fetch is sessionless.
    closed = fetch(wire, sid, -1, {topic: [part(0)]})
    assert (closed.error_code, closed.session_id, answered(closed)) == (0, 0, {0: 0})
    assert fetch(wire, sid, 2, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_full_fetch_replaces_the_session_and_an_emptied_one_closes(wire, make_topic):
    topic = writable(wire, make_topic(partitions=2), 2)
    first = fetch(wire, 0, 0, {topic: [part(0), part(1)]}).session_id
    second = fetch(wire, first, 0, {topic: [part(0)]}).session_id  # a full fetch naming a session closes it
    assert second not in (0, first)
    assert fetch(wire, first, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Forgetting its last partition ends the session: a sessionless answer (id 0) of the request's partitions.
    emptied = fetch(wire, second, 1, {}, forgotten={topic: [0]})
    assert (emptied.error_code, emptied.session_id, emptied.responses) == (0, 0, [])
    assert fetch(wire, second, 2, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
