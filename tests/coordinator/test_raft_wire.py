"""The Raft core's messages through Kafka's RPC codecs and back, byte for byte through the wire."""

from __future__ import annotations

import pytest

from grete.coordinator.kraft import raft_messages as core
from grete.coordinator.kraft.raft_log import OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.raft_wire import METADATA_TOPIC_ID, from_wire, to_wire
from grete.protocol import messages as wire
from grete.protocol.errors import ErrorCode
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.control import ControlType, parse_control_key
from grete.protocol.records.record import decode_records

BATCHES = (RaftBatch(5, 3, (b"leader change",), control=True), RaftBatch(6, 3, (b"a", b"b")))
MESSAGES: list[tuple[core.RaftMessage, int]] = [
    (core.VoteRequest(correlation_id=4, candidate_epoch=3, candidate_id=1, last_offset_epoch=2, last_offset=9), 1),
    (core.VoteResponse(correlation_id=4, error_code=ErrorCode.FENCED_LEADER_EPOCH, leader_id=2, leader_epoch=5,
                       vote_granted=False), 1),
    (core.BeginQuorumEpochRequest(correlation_id=5, leader_id=1, leader_epoch=3), 1),
    (core.BeginQuorumEpochResponse(correlation_id=5, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3), 1),
    (core.EndQuorumEpochRequest(correlation_id=6, leader_id=1, leader_epoch=3, preferred_successors=(3, 2)), 1),
    (core.EndQuorumEpochResponse(correlation_id=6, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3), 1),
    (core.FetchRequest(correlation_id=7, replica_id=2, current_leader_epoch=3, fetch_offset=5, last_fetched_epoch=2),
     17),
    (core.FetchResponse(correlation_id=7, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3, high_watermark=6,
                        batches=BATCHES), 17),
    (core.FetchResponse(correlation_id=8, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3, high_watermark=6,
                        diverging_epoch=OffsetAndEpoch(2, 4)), 17),
]


@pytest.mark.parametrize(("message", "version"), MESSAGES, ids=[type(m).__name__ for m, _ in MESSAGES])
def test_a_core_message_survives_the_wire(message: core.RaftMessage, version: int) -> None:
    rpc = to_wire(message, "cluster", timestamp_ms=1000)
    decoded = type(rpc).from_bytes(rpc.to_bytes(version), version)
    assert from_wire(decoded, message.correlation_id) == message


def test_fetch_names_the_metadata_topic_by_its_id_and_carries_kafka_batches() -> None:
    request = to_wire(MESSAGES[6][0], "cluster")
    assert isinstance(request, wire.FetchRequest) and request.topics[0].topic_id == METADATA_TOPIC_ID
    response = to_wire(MESSAGES[7][0], "cluster", timestamp_ms=1000)
    assert isinstance(response, wire.FetchResponse)
    records = response.responses[0].partitions[0].records
    assert isinstance(records, bytes)
    control, data = list(iter_batches(records))
    assert (control.base_offset, control.partition_leader_epoch, control.is_control) == (5, 3, True)
    assert parse_control_key(decode_records(control)[0].key) == ControlType.LEADER_CHANGE
    assert (data.base_offset, data.records_count, data.is_control) == (6, 2, False)


def test_a_pre_vote_cannot_leave_before_vote_v2() -> None:
    with pytest.raises(NotImplementedError):
        to_wire(core.VoteRequest(correlation_id=1, candidate_epoch=3, candidate_id=1, last_offset_epoch=2,
                                 last_offset=9, pre_vote=True), "cluster")
