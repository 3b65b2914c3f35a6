"""Frames captured from real clients (see golden/README.md): decode, check fields, re-encode exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grete.protocol.framing import FrameReader
from grete.protocol.headers import RequestHeader, decode_request_header
from grete.protocol.messages import APIS
from grete.protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription

GOLDEN = Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("*/*.bin"))
GROUP_CLIENTS = ["kafka-python", "confluent-kafka", "java-3.9.2", "java-4.3.1"]
CLIENT_IDS = {"kafka-python": "golden-kp", "kafka-python-0.10": "golden-kp-old", "aiokafka": "golden-aio",
              "confluent-kafka": "golden-ck", "java-3.9.2": "golden-java", "java-4.3.1": "golden-java"}


def load(path: Path) -> tuple[RequestHeader, Any, memoryview]:
    frames = FrameReader().feed(path.read_bytes())
    assert len(frames) == 1
    header, offset = decode_request_header(frames[0])
    body = frames[0][offset:]
    return header, APIS[header.api_key].request.from_bytes(body, header.api_version), body


def find(client: str, api: str) -> Path:
    matches = [p for p in FILES if p.parent.name == client and f"-{api}-v" in p.name]
    assert matches, f"no {api} frame from {client}"
    return matches[0]


def test_fixtures_present() -> None:
    assert {p.parent.name for p in FILES} >= set(CLIENT_IDS)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_frame_decodes_and_reencodes_exactly(path: Path) -> None:
    header, request, body = load(path)
    assert path.stem.endswith(f"-{APIS[header.api_key].name}-v{header.api_version}")
    assert header.client_id is not None and header.client_id.startswith(CLIENT_IDS[path.parent.name])
    assert request.to_bytes(header.api_version) == bytes(body)


def test_api_versions_first_and_software_names() -> None:
    for client in CLIENT_IDS:
        first = sorted(p for p in FILES if p.parent.name == client)[0]
        assert "-ApiVersions-" in first.name
    _, req, _ = load(find("confluent-kafka", "ApiVersions"))
    assert req.client_software_name == "confluent-kafka-python"
    assert "rdkafka" in req.client_software_version
    _, req, _ = load(find("kafka-python", "ApiVersions"))
    assert req.client_software_name == "kafka-python"


@pytest.mark.parametrize(("client", "text", "magic"), [
    ("kafka-python", b"hello from kafka-python", 2),
    ("confluent-kafka", b"hello from confluent-kafka", 2),
    ("aiokafka", b"hello from aiokafka", 2),
    ("kafka-python-0.10", b"old", 1),
    ("java-3.9.2", b"v0-golden", 2),
    ("java-4.3.1", b"v0-golden", 2),
])
def test_produce_carries_the_record(client: str, text: bytes, magic: int) -> None:
    header, req, _ = load(find(client, "Produce"))
    if header.api_version >= 13:  # topic ids instead of names (the capture broker's id for "golden")
        assert [str(t.topic_id) for t in req.topic_data] == ["5a1f0e4c-6f5b-4e33-9c1a-6f6c64656e21"]
    else:
        assert [t.name for t in req.topic_data] == ["golden"]
    partition = req.topic_data[0].partition_data[0]
    assert partition.index == 0
    records = bytes(partition.records)
    assert records[16] == magic  # magic byte sits at offset 16 in both v1 message sets and v2 batches
    assert text in records
    if header.api_version >= 9:
        assert header.header_version == 2


def test_metadata_and_fetch_fields() -> None:
    _, meta, _ = load(find("confluent-kafka", "Metadata"))
    assert [t.name for t in meta.topics] == ["golden"]
    header, fetch, _ = load(find("confluent-kafka", "Fetch"))
    assert fetch.max_wait_ms == 100
    assert header.api_version >= 13  # topic ids, learnt from the capture broker's Metadata response
    assert [(str(t.topic_id), [p.partition for p in t.partitions]) for t in fetch.topics] == [
        ("5a1f0e4c-6f5b-4e33-9c1a-6f6c64656e21", [0])]
    _, offsets, _ = load(find("kafka-python", "ListOffsets"))
    assert offsets.topics[0].partitions[0].timestamp == -2  # seek_to_beginning = EARLIEST
    _, coordinator, _ = load(find("confluent-kafka", "FindCoordinator"))
    assert coordinator.key == "golden-group"


def test_java_clients_are_idempotent_by_default() -> None:
    for client in ("java-3.9.2", "java-4.3.1"):
        _, init, _ = load(find(client, "InitProducerId"))
        assert init.transactional_id is None and init.producer_id == -1
        _, produce, _ = load(find(client, "Produce"))
        assert produce.acks == -1
        batch = bytes(produce.topic_data[0].partition_data[0].records)
        assert int.from_bytes(batch[43:51], "big", signed=True) != -1  # producerId set in the batch header


def consumer_payload(cls: type[ConsumerProtocolSubscription] | type[ConsumerProtocolAssignment],
                     data: bytes) -> ConsumerProtocolSubscription | ConsumerProtocolAssignment:
    """Consumer-protocol payloads start with an int16 version; newer versions read as our newest."""
    version = min(int.from_bytes(data[:2], "big", signed=True), cls.MAX_VERSION)
    decoded = cls.from_bytes(data[2:], version)
    assert decoded.to_bytes(version) == data[2:]
    return decoded


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_join_group_subscription_metadata(client: str) -> None:
    _, join, _ = load(find(client, "JoinGroup"))
    assert join.group_id == "golden-group" and join.protocol_type == "consumer" and join.member_id == ""
    assert "range" in [p.name for p in join.protocols]
    for protocol in join.protocols:
        subscription = consumer_payload(ConsumerProtocolSubscription, protocol.metadata)
        assert isinstance(subscription, ConsumerProtocolSubscription)
        assert subscription.topics == ["golden"]


@pytest.mark.parametrize("client", ["confluent-kafka", "java-3.9.2", "java-4.3.1"])
def test_sync_group_leader_assignment(client: str) -> None:
    _, sync, _ = load(find(client, "SyncGroup"))
    assert [a.member_id for a in sync.assignments] == [sync.member_id]
    assignment = consumer_payload(ConsumerProtocolAssignment, sync.assignments[0].assignment)
    assert isinstance(assignment, ConsumerProtocolAssignment)
    assert [(t.topic, t.partitions) for t in assignment.assigned_partitions] == [("golden", [0])]


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_consumer_committed_after_reading_the_record(client: str) -> None:
    # The capture broker served the produced batch through grete-encoded Fetch responses; a commit
    # of offset 1 means the client decoded that response and consumed the record.
    _, commit, _ = load(find(client, "OffsetCommit"))
    partitions = [(t.name, p.partition_index, p.committed_offset) for t in commit.topics for p in t.partitions]
    assert partitions == [("golden", 0, 1)]
