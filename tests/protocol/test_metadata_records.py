"""KRaft's metadata records and control-record values: round trips, framing, and what Kafka 4.3.1 writes."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import (
    METADATA_RECORDS,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    KRaftVersionRecord,
    LeaderChangeMessage,
    PartitionRecord,
    QuorumStateData,
    RegisterBrokerRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    TopicRecord,
    UserScramCredentialRecord,
    VotersRecord,
)
from grete.protocol.metadata_frame import (
    CONTROL_VALUES,
    decode_control_value,
    decode_metadata_record,
    encode_control_value,
    encode_metadata_record,
)
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.control import ControlType, parse_control_key
from grete.protocol.records.record import decode_records
from tools import kafka_dist
from tools.reference_kafka import STANDARD_AUTHORIZER, ReferenceKafka, stop_process

# The record types of Kafka 4.3.1's MetadataRecordType, by their names in Kafka's specs.
KAFKA_4_3_RECORDS = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord", 3: "PartitionRecord",
    4: "ConfigRecord", 5: "PartitionChangeRecord", 7: "FenceBrokerRecord", 8: "UnfenceBrokerRecord",
    9: "RemoveTopicRecord", 10: "DelegationTokenRecord", 11: "UserScramCredentialRecord",
    12: "FeatureLevelRecord", 14: "ClientQuotaRecord", 15: "ProducerIdsRecord",
    17: "BrokerRegistrationChangeRecord", 18: "AccessControlEntryRecord", 19: "RemoveAccessControlEntryRecord",
    20: "NoOpRecord", 21: "ZkMigrationStateRecord", 22: "RemoveUserScramCredentialRecord",
    23: "BeginTransactionRecord", 24: "EndTransactionRecord", 25: "AbortTransactionRecord",
    26: "RemoveDelegationTokenRecord", 27: "RegisterControllerRecord", 28: "ClearElrRecord",
}
OTHER_SCHEMAS: list[type[Message]] = [*CONTROL_VALUES.values(), QuorumStateData]
RECORD_CASES = [(cls, v) for cls in METADATA_RECORDS.values() for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
OTHER_CASES = [(cls, v) for cls in OTHER_SCHEMAS for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


def _ids(cases: list[tuple[type[Message], int]]) -> list[str]:
    return [f"{cls.__name__}-v{v}" for cls, v in cases]


def test_record_types_and_versions_are_kafka_4_3s() -> None:
    assert {k: cls.__name__ for k, cls in METADATA_RECORDS.items()} == KAFKA_4_3_RECORDS
    assert all(cls.API_KEY == key and cls.FLEXIBLE_FROM == 0 for key, cls in METADATA_RECORDS.items())
    # HIGHEST_SUPPORTED_VERSION of Kafka 4.3.1's generated classes (javap on kafka-metadata-4.3.1.jar).
    highest = {cls.__name__: cls.MAX_VERSION for cls in METADATA_RECORDS.values() if cls.MAX_VERSION}
    assert highest == {"RegisterBrokerRecord": 4, "PartitionRecord": 2, "PartitionChangeRecord": 2,
                       "BrokerRegistrationChangeRecord": 3}
    assert LeaderChangeMessage.MAX_VERSION == 1 and QuorumStateData.MAX_VERSION == 1


@pytest.mark.parametrize("case", RECORD_CASES, ids=_ids(RECORD_CASES))
def test_records_round_trip_framed(case: tuple[type[Message], int],
                                   make_builder: Callable[[random.Random], Any]) -> None:
    cls, version = case
    b = make_builder(random.Random(f"{cls.__name__}/{version}"))
    for _ in range(6):
        original = b.message(cls, version)
        data = encode_metadata_record(original, version)
        assert decode_metadata_record(data) == (original, version)
        assert encode_metadata_record(decode_metadata_record(data)[0], version) == data
    assert decode_metadata_record(encode_metadata_record(cls()))[1] == cls.MAX_VERSION


@pytest.mark.parametrize("case", OTHER_CASES, ids=_ids(OTHER_CASES))
def test_control_values_and_quorum_state_round_trip(case: tuple[type[Message], int],
                                                    make_builder: Callable[[random.Random], Any]) -> None:
    cls, version = case
    b = make_builder(random.Random(f"{cls.__name__}/{version}"))
    for _ in range(6):
        original = b.message(cls, version)
        data = original.to_bytes(version)
        assert cls.from_bytes(data, version) == original
        assert cls.from_bytes(data, version).to_bytes(version) == data


def test_topic_record_known_bytes() -> None:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    data = encode_metadata_record(TopicRecord(name="t", topic_id=topic_id))
    # frame version 1, type 2, version 0 | compact string "t" | uuid | no tagged fields
    assert data == b"\x01\x02\x00" + b"\x02t" + topic_id.bytes + b"\x00"


def test_control_value_known_bytes() -> None:
    # The int16 Version field leads; the value is read at version 0 whatever it says, as Kafka does.
    header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=7)
    assert encode_control_value(header, 0) == b"\x00\x00" + (7).to_bytes(8, "big") + b"\x00"
    assert decode_control_value(ControlType.SNAPSHOT_HEADER, encode_control_value(header, 0)) == header
    footer = encode_control_value(SnapshotFooterRecord(version=0), 0)
    assert footer == b"\x00\x00\x00"
    assert isinstance(decode_control_value(ControlType.SNAPSHOT_FOOTER, footer), SnapshotFooterRecord)
    kraft = KRaftVersionRecord(version=0, k_raft_version=1)
    assert decode_control_value(ControlType.KRAFT_VERSION, encode_control_value(kraft)) == kraft


def _corrupt(match: str, fn: Callable[..., object], *args: object) -> None:
    with pytest.raises(KafkaError, match=match) as info:
        fn(*args)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_bad_metadata_values_are_corrupt_message() -> None:
    good = encode_metadata_record(TopicRecord(name="t", topic_id=uuid.uuid4()))
    _corrupt("unknown metadata record type 127", decode_metadata_record, b"\x01\x7f\x00\x00")
    _corrupt("unknown metadata record type 6", decode_metadata_record, b"\x01\x06\x00\x00")
    _corrupt("unknown metadata record type", decode_metadata_record, b"\x01\xff\xff\x03\x00")
    _corrupt("frame version 0", decode_metadata_record, b"\x00" + good[1:])
    _corrupt("frame version 2", decode_metadata_record, b"\x02" + good[1:])
    _corrupt("TopicRecord v1 is not supported", decode_metadata_record, good[:2] + b"\x01" + good[3:])
    _corrupt("1 byte.*garbage after TopicRecord", decode_metadata_record, good + b"\x00")
    _corrupt("malformed", decode_metadata_record, b"")
    _corrupt("malformed", decode_metadata_record, b"\x01\x02\x00\x05ab")


def test_truncated_and_mangled_values_never_escape_as_other_errors() -> None:
    broker = RegisterBrokerRecord(broker_id=3, incarnation_id=uuid.uuid4(), broker_epoch=9,
                                  end_points=[RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092)],
                                  features=[RegisterBrokerRecord.BrokerFeature(name="metadata.version",
                                                                               max_supported_version=30)],
                                  rack=None, log_dirs=[uuid.uuid4()], cordoned_log_dirs=[uuid.uuid4()])
    data = encode_metadata_record(broker)
    assert data[2] == 4
    for n in range(len(data)):
        _corrupt("malformed|frame version|unknown", decode_metadata_record, data[:n])
    rng = random.Random(5)
    for _ in range(3000):
        mangled = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        try:
            decode_metadata_record(bytes(mangled))
        except KafkaError as exc:
            assert exc.code == ErrorCode.CORRUPT_MESSAGE
    voters = encode_control_value(VotersRecord(version=0, voters=[VotersRecord.Voter(voter_id=1)]))
    for n in range(len(voters)):
        _corrupt("malformed VotersRecord", decode_control_value, ControlType.KRAFT_VOTERS, voters[:n])
    _corrupt("garbage after VotersRecord", decode_control_value, ControlType.KRAFT_VOTERS, voters + b"\x00")
    _corrupt("type 1 carries no", decode_control_value, ControlType.COMMIT, b"\x00\x00\x00\x00\x00\x00")


def test_only_records_are_framed() -> None:
    with pytest.raises(TypeError):
        encode_metadata_record(LeaderChangeMessage())
    with pytest.raises(TypeError):
        encode_metadata_record(QuorumStateData())
    with pytest.raises(TypeError):
        encode_control_value(TopicRecord())
    with pytest.raises(KafkaError) as info:  # v0 has no CordonedLogDirs: not silently dropped
        encode_metadata_record(BrokerRegistrationChangeRecord(cordoned_log_dirs=[]), 2)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


# ------------------------------------------------------------------------------------------------
# Against what Apache Kafka 4.3.1 writes


def _kafka_values(path: Path) -> list[tuple[bool, bytes | None, bytes]]:
    """(is control, key, value) of every record in a log segment or checkpoint file."""
    out: list[tuple[bool, bytes | None, bytes]] = []
    for batch in iter_batches(path.read_bytes()):
        assert batch.crc_ok()
        for record in decode_records(batch):
            assert record.value is not None
            out.append((batch.is_control, record.key, bytes(record.value)))
    return out


def _unknown_tags(value: object) -> list[tuple[int, bytes]]:
    """Tagged fields the codec did not recognise, anywhere in ``value`` (Kafka 4.3.1 writes none)."""
    if isinstance(value, list):
        return [t for item in value for t in _unknown_tags(item)]
    fields = getattr(value, "_FIELDS", None)
    if fields is None:
        return []
    found = list(getattr(value, "unknown_tagged_fields", None) or [])
    for spec in fields:
        if spec.kind == "struct":
            found += _unknown_tags(getattr(value, spec.name))
    return found


def _check_kafka_files(data_dir: Path) -> tuple[Counter[str], list[Message]]:
    """Decodes every record value Kafka wrote and checks it re-encodes to the same bytes."""
    seen: Counter[str] = Counter()
    records: list[Message] = []
    files = [data_dir / "bootstrap.checkpoint", *sorted((data_dir / "__cluster_metadata-0").glob("*.log")),
             *sorted((data_dir / "__cluster_metadata-0").glob("*.checkpoint"))]
    for path in files:
        for is_control, key, value in _kafka_values(path):
            if is_control:
                message: Message = decode_control_value(parse_control_key(key), value)
                assert encode_control_value(message) == value, message
                assert not _unknown_tags(message), message
            else:
                message, version = decode_metadata_record(value)
                assert encode_metadata_record(message, version) == value, message
                assert not _unknown_tags(message), message
                seen[f"{type(message).__name__} v{version}"] += 1
                records.append(message)
            seen[type(message).__name__] += 1
    return seen, records


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _check_quorum_state(path: Path) -> None:
    """The quorum-state file's JSON keys are QuorumStateData's fields at its data_version."""
    state = json.loads(path.read_text())
    version = state.pop("data_version")
    fields = {spec.name for spec in QuorumStateData._FIELDS if version in spec.versions}
    assert {_snake(k) for k in state} == fields


@pytest.mark.slow
def test_kafka_4_3_metadata_log_decodes_and_reencodes_byte_identical() -> None:
    try:
        kafka_dist.fetch("4")
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"Kafka 4 jars unavailable: {exc}")
    kafka = ReferenceKafka("4", overrides={"authorizer.class.name": STANDARD_AUTHORIZER,
                                           "super.users": "User:ANONYMOUS"})
    with kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for f in admin.create_topics([NewTopic("meta-t", 2, 1, config={"retention.ms": "1234"})]).values():
            f.result(30)
        acl = AclBinding(ResourceType.TOPIC, "meta-t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
        for f in admin.create_acls([acl]).values():
            f.result(30)
        scram = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             b"secret")
        for f in admin.alter_user_scram_credentials([scram]).values():
            f.result(30)
        assert kafka.proc is not None
        stop_process(kafka.proc)  # a clean shutdown, keeping the data directory until the with block ends
        kafka.proc = None
        seen, records = _check_kafka_files(kafka.log_dir)
        _check_quorum_state(kafka.log_dir / "__cluster_metadata-0" / "quorum-state")
    for name in ("TopicRecord", "PartitionRecord", "FeatureLevelRecord", "RegisterBrokerRecord", "ConfigRecord",
                 "AccessControlEntryRecord", "UserScramCredentialRecord", "RegisterControllerRecord",
                 "BrokerRegistrationChangeRecord", "LeaderChangeMessage", "SnapshotHeaderRecord",
                 "SnapshotFooterRecord"):
        assert seen[name], f"no {name} among {sorted(seen)}"
    # Kafka 4.3.1 registers its broker with the newest RegisterBrokerRecord (v4, KIP-1066's CordonedLogDirs).
    assert seen[f"RegisterBrokerRecord v{RegisterBrokerRecord.MAX_VERSION}"] == 1
    # The registration change after startup carries CordonedLogDirs (tag 3 of v3): empty, not null.
    assert [] in [m.cordoned_log_dirs for m in records if isinstance(m, BrokerRegistrationChangeRecord)]
    assert [(m.name, m.topic_id != uuid.UUID(int=0)) for m in records if isinstance(m, TopicRecord)] == [
        ("meta-t", True)]
    assert sorted(m.partition_id for m in records if isinstance(m, PartitionRecord)) == [0, 1]
    assert ("meta-t", "retention.ms", "1234") in [(m.resource_name, m.name, m.value) for m in records
                                                 if isinstance(m, ConfigRecord)]
    assert [(m.principal, m.resource_name) for m in records if isinstance(m, AccessControlEntryRecord)] == [
        ("User:alice", "meta-t")]
    assert [(m.name, m.iterations) for m in records if isinstance(m, UserScramCredentialRecord)] == [("alice", 4096)]
