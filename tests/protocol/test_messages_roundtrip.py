"""Every generated message at every version: random instances and defaults survive encode/decode."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grete.protocol.codec import Message, Reader, UnsupportedVersion, Writer
from grete.protocol.messages import APIS
from grete.protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from grete.protocol.messages.fetch import FetchRequest, FetchResponse
from grete.protocol.messages.metadata import MetadataRequest
from grete.protocol.messages.produce import ProduceRequest


def all_message_classes() -> list[type[Message]]:
    classes: list[type[Message]] = []
    for info in APIS.values():
        classes += [info.request, info.response]
    return classes + [ConsumerProtocolSubscription, ConsumerProtocolAssignment]


CASES = [(cls, v) for cls in all_message_classes() for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


def _ids(case: tuple[type[Message], int]) -> str:
    return f"{case[0].__name__}-v{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_random_instances_round_trip(case: tuple[type[Message], int],
                                     make_builder: Callable[[random.Random], Any]) -> None:
    cls, version = case
    b = make_builder(random.Random(f"{cls.__name__}/{version}"))
    for _ in range(4):
        original = b.message(cls, version)
        data = original.to_bytes(version)
        decoded = cls.from_bytes(data, version)
        assert decoded == original
        # Canonical: re-encoding what we decoded yields the same bytes.
        assert decoded.to_bytes(version) == data
        # A decode consumes exactly what encode wrote.
        r = Reader(data + b"\x7f")
        cls.decode(r, version)
        assert r.remaining() == 1


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_defaults_round_trip(case: tuple[type[Message], int]) -> None:
    cls, version = case
    assert cls.from_bytes(cls().to_bytes(version), version) == cls()


def test_every_api_key_has_consistent_classes() -> None:
    assert len(APIS) >= 88
    for key, info in APIS.items():
        assert info.key == key
        assert info.request.API_KEY == key == info.response.API_KEY
        assert info.request.MIN_VERSION == info.min_version
        assert info.request.MAX_VERSION == info.max_version
        assert info.request.__name__ == info.name + "Request"
        assert info.response.__name__ == info.name + "Response"


def test_merged_version_ranges() -> None:
    # Union of the Oct-2024 trunk specs with the Kafka 4.0/4.3 copies.
    assert (APIS[0].min_version, APIS[0].max_version, APIS[0].flexible_from) == (0, 13, 9)
    assert (APIS[1].min_version, APIS[1].max_version, APIS[1].flexible_from) == (0, 18, 12)
    assert (APIS[2].min_version, APIS[2].max_version) == (0, 11)
    assert (APIS[18].min_version, APIS[18].max_version, APIS[18].flexible_from) == (0, 4, 3)
    assert APIS[74].name == "ListConfigResources"
    max_num = next(f for f in APIS[2].request.ListOffsetsPartition._FIELDS if f.name == "max_num_offsets")
    assert max_num.versions == (0,)


def test_field_absent_at_version_is_rejected_unless_default() -> None:
    req = ProduceRequest(transactional_id="txn", acks=-1)
    with pytest.raises(UnsupportedVersion):
        req.to_bytes(2)
    assert ProduceRequest(acks=-1).to_bytes(2)  # default transactional_id: fine at v2


def test_ignorable_field_is_dropped_silently() -> None:
    # MetadataRequestTopic.TopicId exists from v10 and is ignorable; AllowAutoTopicCreation (v4+)
    # is explicitly not ignorable, so a non-default value must be refused below v4.
    topic = MetadataRequest.MetadataRequestTopic(name="t", topic_id=uuid.UUID(int=5))
    decoded = MetadataRequest.from_bytes(MetadataRequest(topics=[topic]).to_bytes(9), 9)
    assert decoded.topics == [MetadataRequest.MetadataRequestTopic(name="t")]
    with pytest.raises(UnsupportedVersion):
        MetadataRequest(topics=None, allow_auto_topic_creation=False).to_bytes(3)
    assert MetadataRequest(topics=None).to_bytes(3) == b"\xff\xff\xff\xff"


def test_null_where_not_nullable_is_rejected() -> None:
    # Metadata topics become nullable at v1; v0 has no way to say "all topics".
    with pytest.raises(UnsupportedVersion):
        MetadataRequest(topics=None).to_bytes(0)
    # And on the decode side a null array at v0 is malformed input.
    from grete.protocol.errors import ProtocolError
    with pytest.raises(ProtocolError):
        MetadataRequest.from_bytes(b"\xff\xff\xff\xff", 0)


def test_version_out_of_range() -> None:
    with pytest.raises(UnsupportedVersion):
        ProduceRequest().to_bytes(ProduceRequest.MAX_VERSION + 1)
    with pytest.raises(UnsupportedVersion):
        ProduceRequest.from_bytes(b"", -1)


def test_tagged_fields_known_and_unknown_mix() -> None:
    # FetchRequest v12+: ClusterId is tagged (tag 0) at the top level; add an unknown tag around it.
    req = FetchRequest(cluster_id="c1", unknown_tagged_fields=[(7, b"xy")])
    for version in (12, 15, 17):
        data = req.to_bytes(version)
        back = FetchRequest.from_bytes(data, version)
        assert back.cluster_id == "c1"
        assert back.unknown_tagged_fields == [(7, b"xy")]
    # ClusterId is ignorable: below v12 it is dropped. ReplicaState (tag 1, v15+) is not.
    assert FetchRequest.from_bytes(req.to_bytes(11), 11).cluster_id is None
    state = FetchRequest.ReplicaState(replica_id=3, replica_epoch=9)
    back = FetchRequest.from_bytes(FetchRequest(replica_state=state).to_bytes(15), 15)
    assert back.replica_state == state
    for version in (14, 11):  # flexible without the tag, and not flexible at all
        with pytest.raises(UnsupportedVersion):
            FetchRequest(replica_state=state).to_bytes(version)


def test_records_decode_is_a_zero_copy_view() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    req = ProduceRequest(acks=1, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=payload)])])
    data = bytearray(req.to_bytes(9))
    decoded = ProduceRequest.from_bytes(data, 9)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is data  # a view of the input, not a copy
    assert records == payload


class _Chunks:
    """A records value the writer must not read: only size and chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.size = sum(len(c) for c in chunks)


def test_chunked_records_become_external_parts() -> None:
    chunks = [b"a" * 10, b"b" * 5]
    resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[FetchResponse.PartitionData(partition_index=0, records=_Chunks(chunks))])])
    w = Writer()
    size_pos = w.reserve_int32()
    resp.encode(w, 12)
    w.patch_int32(size_pos, w.nbytes - 4)
    parts = w.parts()
    assert parts[1] is chunks[0] and parts[2] is chunks[1]
    with pytest.raises(ValueError):
        w.getvalue()
    flat = b"".join(bytes(p) for p in parts)  # type: ignore[call-overload]
    assert len(flat) == w.nbytes
    assert int.from_bytes(flat[:4], "big") == len(flat) - 4
    back = FetchResponse.from_bytes(flat[4:], 12)
    assert back.responses[0].partitions[0].records == b"a" * 10 + b"b" * 5


def test_class_layout_matches_brief() -> None:
    from grete.protocol.messages.metadata import MetadataResponse
    from grete.protocol.messages.produce import ProduceResponse
    assert ProduceResponse.TopicProduceResponse.__qualname__ == "ProduceResponse.TopicProduceResponse"
    assert hasattr(ProduceResponse, "PartitionProduceResponse")
    assert hasattr(MetadataResponse, "MetadataResponseTopic")
    assert not hasattr(ProduceResponse(), "__dict__")  # slots
    names = {c.__name__ for c in all_message_classes()}
    assert {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment"} <= names


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cls=st.sampled_from([ProduceRequest, FetchRequest, FetchResponse, MetadataRequest,
                            ConsumerProtocolSubscription]),
       rng=st.randoms(use_true_random=False), data=st.data())
def test_property_round_trip(cls: type[Message], rng: random.Random, data: st.DataObject,
                             make_builder: Callable[[random.Random], Any]) -> None:
    version = data.draw(st.integers(cls.MIN_VERSION, cls.MAX_VERSION))
    original = make_builder(rng).message(cls, version)
    assert cls.from_bytes(original.to_bytes(version), version) == original
