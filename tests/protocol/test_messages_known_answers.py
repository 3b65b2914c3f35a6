"""Byte layouts written out by hand from the protocol guide, checked in both directions."""

from __future__ import annotations

import uuid

from grete.protocol.codec import Writer
from grete.protocol.headers import RequestHeader, decode_request_header, encode_request_header
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, ProduceRequest
from grete.protocol.messages.fetch import FetchResponse
from grete.protocol.messages.join_group import JoinGroupRequest


def frame(api_key: int, version: int, correlation_id: int, client_id: str | None, body: bytes) -> bytes:
    w = Writer()
    pos = w.reserve_int32()
    encode_request_header(w, RequestHeader(api_key=api_key, api_version=version,
                                           correlation_id=correlation_id, client_id=client_id))
    w.raw(body)
    w.patch_int32(pos, w.nbytes - 4)
    return w.getvalue()


def test_api_versions_v0_request() -> None:
    assert ApiVersionsRequest().to_bytes(0) == b""
    expected = (b"\x00\x00\x00\x0c"  # size 12
                b"\x00\x12\x00\x00"  # api key 18, version 0
                b"\x00\x00\x00\x01"  # correlation id
                b"\x00\x02id")  # client id, int16 length
    assert frame(18, 0, 1, "id", b"") == expected


def test_api_versions_v3_request() -> None:
    body = (b"\x06grete"  # compact string: length + 1
            b"\x041.0"
            b"\x00")  # no tagged fields
    req = ApiVersionsRequest(client_software_name="grete", client_software_version="1.0")
    assert req.to_bytes(3) == body
    assert ApiVersionsRequest.from_bytes(body, 3) == req
    # Header v2: client id is still an int16-length string, then an empty tagged section.
    expected = b"\x00\x00\x00\x18" + b"\x00\x12\x00\x03\x00\x00\x00\x07" + b"\x00\x02id" + b"\x00" + body
    data = frame(18, 3, 7, "id", body)
    assert data == expected
    header, offset = decode_request_header(data[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 3, 7, "id")
    assert ApiVersionsRequest.from_bytes(data[4 + offset:], 3) == req


def test_api_versions_v3_response_with_tagged_field() -> None:
    resp = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0,
        finalized_features_epoch=5,
    )
    expected = (b"\x00\x00"  # error code
                b"\x02"  # one api key (compact array: n + 1)
                b"\x00\x12\x00\x00\x00\x04\x00"  # key, min, max, empty tagged section
                b"\x00\x00\x00\x00"  # throttle time
                b"\x01"  # one tagged field
                b"\x01\x08\x00\x00\x00\x00\x00\x00\x00\x05")  # tag 1, size 8, int64 epoch
    assert resp.to_bytes(3) == expected
    assert ApiVersionsResponse.from_bytes(expected, 3) == resp


def test_api_versions_v0_response() -> None:
    resp = ApiVersionsResponse(error_code=35, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=11)])
    expected = b"\x00\x23" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x0b"
    assert resp.to_bytes(0) == expected


def test_metadata_v1_request() -> None:
    expected = b"\x00\x00\x00\x01" + b"\x00\x03foo"
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")])
    assert req.to_bytes(1) == expected
    assert MetadataRequest.from_bytes(expected, 1) == req
    # Null topic list = all topics (v1+).
    assert MetadataRequest(topics=None).to_bytes(1) == b"\xff\xff\xff\xff"
    assert MetadataRequest.from_bytes(b"\xff\xff\xff\xff", 1).topics is None


def test_metadata_v12_request_uuid_and_compact() -> None:
    topic_id = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    expected = (b"\x02" + bytes(range(16)) + b"\x00" + b"\x00"  # topic: id, null name, tags
                + b"\x00"  # allow auto creation false
                + b"\x01"  # include topic authorized ops
                + b"\x00")
    assert req.to_bytes(12) == expected
    assert MetadataRequest.from_bytes(expected, 12) == req


def test_produce_v9_flexible_request_with_compact_records() -> None:
    records = b"RECORDS!"
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=2, records=records)])])
    expected = (b"\x00"  # null transactional id (compact: 0)
                b"\xff\xff"  # acks -1
                b"\x00\x00\x75\x30"  # timeout 30000
                b"\x02"  # one topic
                b"\x02t"  # compact name
                b"\x02"  # one partition
                b"\x00\x00\x00\x02"  # index
                b"\x09RECORDS!"  # compact records: 8 + 1
                b"\x00"  # partition tags
                b"\x00"  # topic tags
                b"\x00")  # request tags
    assert req.to_bytes(9) == expected
    back = ProduceRequest.from_bytes(expected, 9)
    assert back.topic_data[0].partition_data[0].records == records


def test_produce_v3_classic_request() -> None:
    req = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=1, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=None)])])
    expected = (b"\x00\x02tx" b"\x00\x01" b"\x00\x00\x00\x01" b"\x00\x00\x00\x01" b"\x00\x01t"
                b"\x00\x00\x00\x01" b"\x00\x00\x00\x00" b"\xff\xff\xff\xff")
    assert req.to_bytes(3) == expected
    assert ProduceRequest.from_bytes(expected, 3) == req


def test_fetch_response_v12_tagged_struct_in_partition() -> None:
    # CurrentLeader is tag 1 of PartitionData (v12+): only written when not the default.
    part = FetchResponse.PartitionData(partition_index=0, high_watermark=10, records=b"",
                                       current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=2))
    data = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])]).to_bytes(12)
    tail = b"\x01" + b"\x01\x09" + b"\x00\x00\x00\x01\x00\x00\x00\x02\x00"  # 1 tag: tag 1, 9 bytes
    assert tail + b"\x00" + b"\x00" in data  # then topic tags and response tags
    back = FetchResponse.from_bytes(data, 12)
    assert back.responses[0].partitions[0].current_leader.leader_epoch == 2


def test_join_group_v0_request() -> None:
    req = JoinGroupRequest(group_id="g", session_timeout_ms=10, member_id="", protocol_type="consumer",
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x01")])
    expected = (b"\x00\x01g" b"\x00\x00\x00\x0a" b"\x00\x00" b"\x00\x08consumer"
                b"\x00\x00\x00\x01" b"\x00\x05range" b"\x00\x00\x00\x01\x01")
    assert req.to_bytes(0) == expected
    assert JoinGroupRequest.from_bytes(expected, 0) == req
