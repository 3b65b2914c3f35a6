"""The Raft core's messages through Kafka's RPC codecs and back, byte for byte through the wire."""

from __future__ import annotations

import pytest

from grete.coordinator.kraft import raft_messages as core
from grete.coordinator.kraft.raft_log import OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.raft_wire import METADATA_TOPIC_ID, from_wire, to_wire
from grete.protocol import messages as wire
from grete.protocol.codec import UnsupportedVersion
from grete.protocol.errors import ErrorCode
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.control import ControlType, parse_control_key
from grete.protocol.records.record import decode_records

BATCHES = (RaftBatch(5, 3, (b"leader change",), control=True), RaftBatch(6, 3, (b"a", b"b")))
FETCH = core.FetchRequest(correlation_id=7, replica_id=2, current_leader_epoch=3, fetch_offset=5, last_fetched_epoch=2)
FETCH_ANSWER = core.FetchResponse(correlation_id=7, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3,
                                  high_watermark=6, batches=BATCHES)
VOTE = core.VoteRequest(correlation_id=4, candidate_epoch=4, candidate_id=1, last_offset_epoch=2, last_offset=9)
# A prospective in epoch 3 asking whether it could become the candidate of epoch 4.
PRE_VOTE = core.VoteRequest(correlation_id=3, candidate_epoch=4, candidate_id=1, last_offset_epoch=2, last_offset=9,
                            pre_vote=True)
MESSAGES: list[tuple[core.RaftMessage, int]] = [
    (VOTE, 1),
    (VOTE, 2),
    (PRE_VOTE, 2),
    (core.VoteResponse(correlation_id=4, error_code=ErrorCode.FENCED_LEADER_EPOCH, leader_id=2, leader_epoch=5,
                       vote_granted=False), 1),
    (core.VoteResponse(correlation_id=3, error_code=ErrorCode.NONE, leader_id=-1, leader_epoch=3,
                       vote_granted=True), 2),
    (core.BeginQuorumEpochRequest(correlation_id=5, leader_id=1, leader_epoch=3), 1),
    (core.BeginQuorumEpochResponse(correlation_id=5, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3), 1),
    (core.EndQuorumEpochRequest(correlation_id=6, leader_id=1, leader_epoch=3, preferred_successors=(3, 2)), 1),
    (core.EndQuorumEpochResponse(correlation_id=6, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3), 1),
    (FETCH, 17),
    (FETCH_ANSWER, 17),
    (core.FetchResponse(correlation_id=8, error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3, high_watermark=6,
                        diverging_epoch=OffsetAndEpoch(2, 4)), 17),
]


@pytest.mark.parametrize(("message", "version"), MESSAGES,
                         ids=[f"{type(m).__name__}-v{v}" + ("-pre" if getattr(m, "pre_vote", False) else "")
                              for m, v in MESSAGES])
def test_a_core_message_survives_the_wire(message: core.RaftMessage, version: int) -> None:
    rpc = to_wire(message, "cluster", timestamp_ms=1000)
    decoded = type(rpc).from_bytes(rpc.to_bytes(version), version)
    assert from_wire(decoded, message.correlation_id) == message


def test_fetch_names_the_metadata_topic_by_its_id_and_carries_kafka_batches() -> None:
    request = to_wire(FETCH, "cluster")
    assert isinstance(request, wire.FetchRequest) and request.topics[0].topic_id == METADATA_TOPIC_ID
    response = to_wire(FETCH_ANSWER, "cluster", timestamp_ms=1000)
    assert isinstance(response, wire.FetchResponse)
    records = response.responses[0].partitions[0].records
    assert isinstance(records, bytes)
    control, data = list(iter_batches(records))
    assert (control.base_offset, control.partition_leader_epoch, control.is_control) == (5, 3, True)
    assert parse_control_key(decode_records(control)[0].key) == ControlType.LEADER_CHANGE
    assert (data.base_offset, data.records_count, data.is_control) == (6, 2, False)


# What Kafka 4.3.1's VoteRequestData writes at v2 for cluster "cluster", __cluster_metadata-0, replica 1
# with log end (epoch 2, offset 9): a prospective in epoch 3 (PreVote, ReplicaEpoch 3, as KafkaRaftClient
# sends its unbumped epoch) and a candidate of epoch 4.
KAFKA_VOTE_V2 = ("08636c7573746572ffffffff02135f5f636c75737465725f6d657461646174610200000000{epoch}00000001"
                 + "00" * 32 + "000000020000000000000009{pre}000000")
KAFKA_PRE_VOTE_V2 = bytes.fromhex(KAFKA_VOTE_V2.format(epoch="00000003", pre="01"))
KAFKA_CANDIDATE_VOTE_V2 = bytes.fromhex(KAFKA_VOTE_V2.format(epoch="00000004", pre="00"))


def test_a_pre_vote_goes_out_as_kafka_4_3_writes_it() -> None:
    assert to_wire(PRE_VOTE, "cluster").to_bytes(2) == KAFKA_PRE_VOTE_V2
    assert to_wire(VOTE, "cluster").to_bytes(2) == KAFKA_CANDIDATE_VOTE_V2


def test_a_pre_vote_from_kafka_reaches_the_core_as_one() -> None:
    decoded = wire.VoteRequest.from_bytes(KAFKA_PRE_VOTE_V2, 2)
    assert from_wire(decoded, 3) == PRE_VOTE


def test_a_pre_vote_cannot_be_written_before_vote_v2() -> None:
    with pytest.raises(UnsupportedVersion):
        to_wire(PRE_VOTE, "cluster").to_bytes(1)
