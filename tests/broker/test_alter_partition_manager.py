"""A leader's AlterPartition sender against a controller that answers badly: an answer that cannot
be decoded, then one that leaves a partition out. Every ISR change still gets through, since this
one task carries all of a broker's ISR changes (one that died would freeze every ISR it leads)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

from grete.broker.cluster.alter_partition import AlterPartitionManager
from grete.broker.replica.partition import Partition
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, response_header_version
from grete.storage.config import LogConfig
from grete.storage.log import Log

TOPIC_ID = uuid.uuid4()


def leader(tmp_path: Path, index: int) -> Partition:
    log = Log.open(tmp_path / f"t-{index}", LogConfig(), topic_id=TOPIC_ID, clean_shutdown=True)
    partition = Partition("t", index, TOPIC_ID, log, -1, is_leader=False, replicated=True, broker_id=1)
    partition.make_leader(0, 0, 1, (1, 2), [1], now_ms=1000)
    return partition


class Controller:
    """Answers AlterPartition: garbage first, then without partition 1, then in full."""

    def __init__(self) -> None:
        self.requests: list[AlterPartitionRequest] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(length)
            except asyncio.IncompleteReadError:
                return
            header, pos = decode_request_header(frame)
            request = AlterPartitionRequest.decode(Reader(frame, pos), header.api_version)
            self.requests.append(request)
            w = Writer()
            size = w.reserve_int32()
            encode_response_header(w, header.correlation_id, response_header_version(header.api_key, header.api_version))
            if len(self.requests) == 1:
                w.buf += b"\xff\xff\xff"  # an answer cut short
            else:
                self.answer(request, leave_out=1 if len(self.requests) == 2 else None).encode(w, header.api_version)
            w.patch_int32(size, w.nbytes - 4)
            writer.write(w.getvalue())
            await writer.drain()

    @staticmethod
    def answer(request: AlterPartitionRequest, leave_out: int | None) -> AlterPartitionResponse:
        topics = [AlterPartitionResponse.TopicData(topic_name=t.topic_name, topic_id=t.topic_id, partitions=[
            AlterPartitionResponse.PartitionData(partition_index=p.partition_index, error_code=ErrorCode.NONE,
                                                 leader_id=1, leader_epoch=p.leader_epoch, isr=list(p.new_isr),
                                                 partition_epoch=p.partition_epoch + 1)
            for p in t.partitions if p.partition_index != leave_out]) for t in request.topics]
        return AlterPartitionResponse(error_code=ErrorCode.NONE, topics=topics)


async def _settle_through_a_bad_controller(tmp_path: Path) -> tuple[list[list[int]], list[int], Controller]:
    controller = Controller()
    server = await asyncio.start_server(controller.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    info = BrokerInfo(0, (EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),))
    manager = AlterPartitionManager(1, lambda: 7, lambda: info, "PLAINTEXT")
    partitions = [leader(tmp_path, 0), leader(tmp_path, 1)]
    try:
        for partition in partitions:
            partition.alter_isr = manager.submit
            partition.update_follower(2, 0, now_ms=2000)  # caught up: joins the ISR
        async with asyncio.timeout(10):
            while any(p.isr != [1, 2] for p in partitions):
                await asyncio.sleep(0.01)
    finally:
        manager.shutdown()
        server.close()
        await server.wait_closed()
    return [p.isr for p in partitions], [p.partition_epoch for p in partitions], controller


def test_isr_changes_get_through_an_undecodable_and_an_incomplete_answer(tmp_path: Path) -> None:
    isrs, epochs, controller = asyncio.run(_settle_through_a_bad_controller(tmp_path))
    assert isrs == [[1, 2], [1, 2]] and epochs == [1, 1]
    sent = [sorted(p.partition_index for t in r.topics for p in t.partitions) for r in controller.requests]
    assert sent[0] == [0, 1] and sent[1:] == [[0, 1], [1]], sent  # the left-out partition alone, again
    assert all(r.broker_epoch == 7 for r in controller.requests)
