"""Record the raw request frames real Kafka clients send, as golden fixtures for the codec tests.

    python -m tools.capture_frames [--out tests/protocol/golden]

Listens on 127.0.0.1, runs each client scenario in a subprocess against it, and answers with grete's
own encoded responses (a one-broker cluster with topic "golden", one partition) so the client gets
past ApiVersions and Metadata to Produce, and consumers through a one-member group (JoinGroup,
SyncGroup, OffsetFetch, Fetch of the batches produced earlier in the same scenario, OffsetCommit). Every request frame (size prefix
included) is written to <out>/<client>/<NN>-<Api>-v<version>.bin; repeats of an api/version are kept
once. Not part of the product: a developer tool.
"""

from __future__ import annotations

import argparse
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

from grete.protocol.codec import ZERO_UUID, Message, Writer
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import (
    APIS,
    ApiVersionsResponse,
    FetchResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    ProduceResponse,
    SyncGroupResponse,
    response_header_version,
)

TOPIC = "golden"
# What the capture broker advertises: close to a Kafka 3.9 broker for the APIs it answers.
ADVERTISED = {0: (0, 11), 1: (0, 16), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 5), 11: (0, 9),
              12: (0, 4), 13: (0, 5), 14: (0, 5), 18: (0, 4), 22: (0, 5)}

SCENARIOS = {
    "kafka-python": """
        from kafka import KafkaProducer, KafkaConsumer
        p = KafkaProducer(bootstrap_servers=ADDR, client_id="golden-kp", linger_ms=0)
        p.send("golden", key=b"k", value=b"hello from kafka-python").get(timeout=10)
        p.close(timeout=5)
        c = KafkaConsumer(bootstrap_servers=ADDR, client_id="golden-kp-consumer", enable_auto_commit=False,
                          fetch_max_wait_ms=100, consumer_timeout_ms=5000, group_id="golden-group",
                          auto_offset_reset="earliest")
        c.subscribe(["golden"])
        for _ in c:
            break
        c.commit()
        c.close()
    """,
    # Pinned to an old broker version: no ApiVersions, classic (non-flexible) encodings.
    "kafka-python-0.10": """
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=ADDR, client_id="golden-kp-old", linger_ms=0, api_version=(0, 10, 1))
        p.send("golden", value=b"old").get(timeout=10)
        p.close(timeout=5)
    """,
    "aiokafka": """
        import asyncio
        from aiokafka import AIOKafkaProducer

        async def main():
            p = AIOKafkaProducer(bootstrap_servers=ADDR, client_id="golden-aio")
            await p.start()
            try:
                await p.send_and_wait("golden", b"hello from aiokafka", key=b"k")
            finally:
                await p.stop()

        asyncio.run(main())
    """,
    "confluent-kafka": """
        from confluent_kafka import Producer, Consumer
        p = Producer({"bootstrap.servers": ADDR, "client.id": "golden-ck", "linger.ms": 0,
                      "enable.idempotence": False})
        p.produce("golden", key=b"k", value=b"hello from confluent-kafka")
        assert p.flush(10) == 0
        import time
        c = Consumer({"bootstrap.servers": ADDR, "client.id": "golden-ck-consumer", "group.id": "golden-group",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100, "auto.offset.reset": "earliest"})
        c.subscribe(["golden"])
        deadline = time.time() + 10
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                c.commit(message=m, asynchronous=False)
                break
        c.close()
    """,
}


# For the newest client: everything the codecs know (Produce v13 and Fetch v18 use topic ids).
LATEST = {key: (APIS[key].min_version, APIS[key].max_version) for key in ADVERTISED}
TOPIC_ID = uuid.UUID("5a1f0e4c-6f5b-4e33-9c1a-6f6c64656e21")


class Capture:
    def __init__(self, port: int, advertised: dict[int, tuple[int, int]]) -> None:
        self.port = port
        self.advertised = advertised
        self.frames: list[bytes] = []
        self.lock = threading.Lock()
        self.batches: list[bytes] = []  # what producers sent to golden-0, served back by Fetch

    def record(self, frame: bytes) -> None:
        with self.lock:
            self.frames.append(frame)

    # Responses -----------------------------------------------------------------------------------

    def respond(self, api_key: int, version: int, request: Any) -> Message | None:
        if api_key == 18:
            keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(self.advertised.items())]
            return ApiVersionsResponse(error_code=0, api_keys=keys)
        if api_key == 3:
            return self.metadata(request)
        if api_key == 0:
            for topic in request.topic_data:
                for part in topic.partition_data:
                    if part.records is not None:
                        with self.lock:
                            self.batches.append(bytes(part.records))
            if request.acks == 0:
                return None
            return ProduceResponse(responses=[
                ProduceResponse.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=p.index, base_offset=0)
                    for p in t.partition_data]) for t in request.topic_data])
        if api_key == 2:
            return ListOffsetsResponse(topics=[
                ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
                    ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, offset=self.end_offset() if p.timestamp == -1 else 0,
                        old_style_offsets=[0] if version == 0 else [])
                    for p in t.partitions]) for t in request.topics])
        if api_key == 1:
            end = self.end_offset()
            return FetchResponse(responses=[
                FetchResponse.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
                    FetchResponse.PartitionData(partition_index=p.partition, high_watermark=end,
                                                last_stable_offset=end, records=self.fetch(p.fetch_offset))
                    for p in t.partitions]) for t in request.topics])
        if api_key == 10:
            if version < 4:  # one coordinator in top-level fields; v4+ batches keys
                return FindCoordinatorResponse(node_id=0, host="127.0.0.1", port=self.port)
            return FindCoordinatorResponse(coordinators=[
                FindCoordinatorResponse.Coordinator(key=k, node_id=0, host="127.0.0.1", port=self.port)
                for k in request.coordinator_keys])
        if api_key == 22:
            return InitProducerIdResponse(producer_id=1000, producer_epoch=0)
        return self.group(api_key, version, request)

    def end_offset(self) -> int:
        return len(self.batches)  # one record per batch in every scenario

    def fetch(self, offset: int) -> bytes:
        with self.lock:
            if offset >= len(self.batches):
                return b""
            # Rewrite baseOffset so batch i sits at offset i.
            return b"".join(i.to_bytes(8, "big") + b[8:] for i, b in enumerate(self.batches) if i >= offset)

    def group(self, api_key: int, version: int, request: Any) -> Message | None:
        """Just enough of a one-member group for a consumer to join, sync, fetch and commit."""
        if api_key == 11:
            member = request.member_id or "golden-member-1"
            protocol = request.protocols[0]
            return JoinGroupResponse(generation_id=1, protocol_type=request.protocol_type,
                                     protocol_name=protocol.name, leader=member, member_id=member,
                                     members=[JoinGroupResponse.JoinGroupResponseMember(
                                         member_id=member, metadata=protocol.metadata)])
        if api_key == 14:
            mine = [a.assignment for a in request.assignments if a.member_id == request.member_id]
            return SyncGroupResponse(protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                                     assignment=mine[0] if mine else b"")
        if api_key == 9:
            return self.offset_fetch(version, request)
        if api_key == 8:
            return OffsetCommitResponse(topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name, topic_id=t.topic_id, partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index)
                    for p in t.partitions]) for t in request.topics])
        if api_key == 12:
            return HeartbeatResponse()
        if api_key == 13:
            return LeaveGroupResponse()
        return None

    @staticmethod
    def offset_fetch(version: int, request: Any) -> OffsetFetchResponse:
        none_committed = OffsetFetchResponse
        if version < 8:
            return OffsetFetchResponse(topics=[none_committed.OffsetFetchResponseTopic(name=t.name, partitions=[
                none_committed.OffsetFetchResponsePartition(partition_index=i, committed_offset=-1)
                for i in t.partition_indexes]) for t in request.topics or []])
        return OffsetFetchResponse(groups=[none_committed.OffsetFetchResponseGroup(group_id=g.group_id, topics=[
            none_committed.OffsetFetchResponseTopics(name=t.name, topic_id=t.topic_id, partitions=[
                none_committed.OffsetFetchResponsePartitions(partition_index=i, committed_offset=-1)
                for i in t.partition_indexes]) for t in g.topics or []]) for g in request.groups])

    def metadata(self, request: Any) -> MetadataResponse:
        names = [TOPIC] if request.topics is None else [t.name for t in request.topics if t.name]
        return MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
            cluster_id="golden-cluster", controller_id=0,
            topics=[MetadataResponse.MetadataResponseTopic(
                error_code=0 if name == TOPIC else 3, name=name, topic_id=TOPIC_ID if name == TOPIC else ZERO_UUID,
                partitions=[MetadataResponse.MetadataResponsePartition(
                    partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0], isr_nodes=[0])]
                if name == TOPIC else []) for name in names])


def make_handler(capture: Capture) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            sock.settimeout(10)
            try:
                while True:
                    prefix = _recv_exact(sock, 4)
                    frame = _recv_exact(sock, int.from_bytes(prefix, "big"))
                    capture.record(prefix + frame)
                    header, offset = decode_request_header(frame)
                    info = APIS[header.api_key]
                    request = info.request.from_bytes(frame[offset:], header.api_version)
                    response = capture.respond(header.api_key, header.api_version, request)
                    if response is None:
                        continue
                    w = Writer()
                    pos = w.reserve_int32()
                    encode_response_header(w, header.correlation_id,
                                           response_header_version(header.api_key, header.api_version))
                    response.encode(w, header.api_version)
                    w.patch_int32(pos, w.nbytes - 4)
                    sock.sendall(w.getvalue())
            except (ConnectionError, TimeoutError, EOFError):
                return

    return Handler


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


# Java's kafka-clients through tools/java/GreteJavaClient (built by tools/kafka_dist.py): an
# idempotent producer of one record, for each pinned kafka-clients version.
JAVA_SCENARIOS = {"java-3.9.2": "3.9.2", "java-4.3.1": "4.3.1"}
# Scenarios that see a broker advertising the newest versions instead of Kafka 3.9's.
NEWEST = {"java-4.3.1"}


def client_commands(name: str, addr: str) -> list[list[str]]:
    """The processes a scenario runs one after the other against the capture broker."""
    if name in JAVA_SCENARIOS:
        from tools import kafka_dist

        version = JAVA_SCENARIOS[name]
        return [kafka_dist.harness_cmd(version, "produce", addr, TOPIC, "1", "client.id=golden-java"),
                kafka_dist.harness_cmd(version, "consume", addr, TOPIC, "golden-group", "1",
                                       "client.id=golden-java-consumer")]
    return [[sys.executable, "-c", f"ADDR = {addr!r}\n" + textwrap.dedent(SCENARIOS[name])]]


def run_scenario(name: str, out: Path) -> list[Path]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), None)  # type: ignore[arg-type]
    port = server.server_address[1]
    capture = Capture(port, LATEST if name in NEWEST else ADVERTISED)
    server.RequestHandlerClass = make_handler(capture)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for command in client_commands(name, f"127.0.0.1:{port}"):
            proc = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                print(f"{name}: client exited {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
    finally:
        server.shutdown()
        server.server_close()
    return save(name, capture.frames, out)


def save(client: str, frames: list[bytes], out: Path) -> list[Path]:
    target = out / client
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.bin"):
        old.unlink()
    seen: set[tuple[int, int]] = set()
    written: list[Path] = []
    for frame in frames:
        key = (int.from_bytes(frame[4:6], "big", signed=True), int.from_bytes(frame[6:8], "big", signed=True))
        if key in seen:
            continue
        seen.add(key)
        path = target / f"{len(written):02d}-{APIS[key[0]].name}-v{key[1]}.bin"
        path.write_bytes(frame)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("tests/protocol/golden"))
    parser.add_argument("clients", nargs="*", default=sorted([*SCENARIOS, *JAVA_SCENARIOS]))
    args = parser.parse_args(argv)
    for name in args.clients:
        paths = run_scenario(name, args.out)
        print(f"{name}: {', '.join(p.name for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
