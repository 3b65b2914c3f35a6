"""The share coordinator's v1 messages and DescribeShareGroupOffsets v1, byte for byte as Kafka 4.3.1's
kafka-clients writes them (MessageUtil.toByteBufferAccessor of the same values, run once by hand with
the jars tools/kafka_dist.py fetches): the layouts grete's spec corrections (tools/codegen/specs_local)
were read from, now checked against Kafka's own serializer."""

from __future__ import annotations

import uuid

from grete.protocol.messages import (
    DescribeShareGroupOffsetsResponse,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
)

TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
W, S, D = WriteShareGroupStateRequest, ReadShareGroupStateSummaryResponse, DescribeShareGroupOffsetsResponse

WRITE_V1 = ("0267020102030405060708090a0b0c0d0e0f1002000000030000000100000002000000000000000a0000000402"
            "000000000000000a000000000000000e02000100000000")
WRITE_V0 = ("0267020102030405060708090a0b0c0d0e0f1002000000030000000100000002000000000000000a02000000000000"
            "000a000000000000000e02000100000000")
SUMMARY_V1 = "020102030405060708090a0b0c0d0e0f1002000000030000000000000100000002000000000000000a00000004000000"
SUMMARY_V0 = "020102030405060708090a0b0c0d0e0f1002000000030000000000000100000002000000000000000a000000"
DESCRIBE_V1 = ("000000000202670202740102030405060708090a0b0c0d0e0f10020000000000000000000000050000000000000000"
               "0000000700000000000000000000")


def test_write_share_group_state_v0_and_v1() -> None:
    request = W(group_id="g", topics=[W.WriteStateData(topic_id=TOPIC_ID, partitions=[W.PartitionData(
        partition=3, state_epoch=1, leader_epoch=2, start_offset=10, delivery_complete_count=4, state_batches=[
            W.StateBatch(first_offset=10, last_offset=14, delivery_state=2, delivery_count=1)])])])
    assert request.to_bytes(1).hex() == WRITE_V1
    assert request.to_bytes(0).hex() == WRITE_V0  # v0 has no DeliveryCompleteCount
    assert W.from_bytes(bytes.fromhex(WRITE_V1), 1) == request


def test_read_share_group_state_summary_v0_and_v1() -> None:
    response = S(results=[S.ReadStateSummaryResult(topic_id=TOPIC_ID, partitions=[S.PartitionResult(
        partition=3, state_epoch=1, leader_epoch=2, start_offset=10, delivery_complete_count=4)])])
    assert response.to_bytes(1).hex() == SUMMARY_V1
    assert response.to_bytes(0).hex() == SUMMARY_V0  # LeaderEpoch from v0, DeliveryCompleteCount from v1
    assert S.from_bytes(bytes.fromhex(SUMMARY_V0), 0).results[0].partitions[0].delivery_complete_count == -1


def test_describe_share_group_offsets_v1_lag() -> None:
    response = D(groups=[D.DescribeShareGroupOffsetsResponseGroup(group_id="g", topics=[
        D.DescribeShareGroupOffsetsResponseTopic(topic_name="t", topic_id=TOPIC_ID, partitions=[
            D.DescribeShareGroupOffsetsResponsePartition(partition_index=0, start_offset=5, leader_epoch=0, lag=7)])])])
    assert response.to_bytes(1).hex() == DESCRIBE_V1
