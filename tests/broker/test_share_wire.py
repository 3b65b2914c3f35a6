"""Share groups on the wire (KIP-932): a member joins, a share session acquires records, errors for
bad epochs and foreign acknowledgements, and the share partition's state survives a restart in
``__share_group_state``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from grete.testing._wire import Wire
from grete.testing.inprocess import broker

Ack = ShareAcknowledgeRequest


def join(wire: Wire, member: str) -> Any:
    r = wire.call(ShareGroupHeartbeatRequest(group_id="g", member_id=member, member_epoch=0,
                                             subscribed_topic_names=["t"]), ShareGroupHeartbeatResponse, 1)
    assert r.error_code == 0, r.error_message
    return r


def fetch(wire: Wire, member: str, epoch: int, topic_id: Any, wait_ms: int = 0,
          acks: list[tuple[int, int, list[int]]] | None = None) -> Any:
    batches = [ShareFetchRequest.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
               for f, last, t in acks or []]
    request = ShareFetchRequest(group_id="g", member_id=member, share_session_epoch=epoch, max_wait_ms=wait_ms,
                                min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                                    ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                        ShareFetchRequest.FetchPartition(partition_index=0,
                                                                         acknowledgement_batches=batches)])])
    return wire.call(request, ShareFetchResponse, 2)


def acquired(response: Any) -> list[tuple[int, int, int]]:
    assert response.error_code == 0, response.error_message
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def acknowledge(wire: Wire, member: str, epoch: int, topic_id: Any, acks: list[tuple[int, int, list[int]]]) -> Any:
    return wire.call(Ack(group_id="g", member_id=member, share_session_epoch=epoch, topics=[Ack.AcknowledgeTopic(
        topic_id=topic_id, partitions=[Ack.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            Ack.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
            for f, last, t in acks])])]), ShareAcknowledgeResponse, 2)


def produce(bootstrap: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(n):
        p.produce("t", f"v{i}".encode(), partition=0)
    p.flush(30)


def test_share_session_acknowledgements_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker(data_dir=data, topics={"t": 1}) as b:
        wire = Wire(b.host, b.port)
        hb = join(wire, "m1")
        assert hb.member_epoch == 2 and hb.heartbeat_interval_ms == 5000  # a new group is at 1
        (tp,) = hb.assignment.topic_partitions
        topic_id = tp.topic_id
        assert tp.partitions == [0]
        assert acquired(fetch(wire, "m1", 0, topic_id)) == []  # latest: the share partition starts at 0 now
        produce(b.bootstrap_servers, 6)
        assert acquired(fetch(wire, "m1", 1, topic_id, wait_ms=2000)) == [(0, 5, 1)]
        # Acknowledgements on the opening epoch, a stale epoch, records not acquired by this member.
        assert fetch(wire, "m1", 0, topic_id, acks=[(0, 0, [1])]).error_code == ErrorCode.INVALID_REQUEST
        assert acknowledge(wire, "m1", 7, topic_id, [(0, 0, [1])]).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        other = Wire(b.host, b.port)
        join(other, "m2")
        assert acquired(fetch(other, "m2", 0, topic_id)) == []
        foreign = acknowledge(other, "m2", 1, topic_id, [(0, 0, [1])])
        assert foreign.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        mine = acknowledge(wire, "m1", 2, topic_id, [(0, 2, [1]), (3, 3, [2])])
        assert mine.error_code == 0 and mine.responses[0].partitions[0].error_code == 0
        assert acquired(fetch(other, "m2", 2, topic_id)) == [(3, 3, 2)]  # released: redelivered to m2
        described = wire.call(ShareGroupDescribeRequest(group_ids=["g", "nope"]), ShareGroupDescribeResponse, 1)
        g, nope = described.groups
        assert (g.group_state, g.group_epoch, sorted(m.member_id for m in g.members)) == ("Stable", 3, ["m1", "m2"])
        assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # The final epoch closes both sessions: what they hold is released, and written, now.
        assert acknowledge(other, "m2", -1, topic_id, []).error_code == 0
        assert acknowledge(wire, "m1", -1, topic_id, []).error_code == 0
        wire.close()
        other.close()
    with broker(data_dir=data) as b:
        wire = Wire(b.host, b.port)
        # Known at start-up, before any member is back: SPSO 3, 3 records past it not yet delivered
        # for good.
        D = DescribeShareGroupOffsetsRequest
        described_offsets = wire.call(D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=None)]),
                                      DescribeShareGroupOffsetsResponse, 1)
        (p,) = described_offsets.groups[0].topics[0].partitions
        assert (p.partition_index, p.start_offset, p.lag) == (0, 3, 3)
        join(wire, "m3")
        # Offsets 0-2 stay acknowledged (the SPSO is 3); closing the sessions released 3 (delivered
        # twice) and 4-5 (once), and that release was written before the restart.
        assert acquired(fetch(wire, "m3", 0, topic_id, wait_ms=2000)) == [(3, 3, 3), (4, 5, 2)]
        wire.close()
