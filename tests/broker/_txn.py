"""A transactional producer speaking the raw protocol, and read_committed helpers: shared by the
broker's transaction tests and the differential compat test of error codes."""

from __future__ import annotations

import time
import uuid

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from grete.protocol.records.batch import iter_batches
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.testing._wire import Wire

# Apache Kafka finishes EndTxn and fencing aborts asynchronously and answers these meanwhile.
TRANSIENT = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


def settled(call, timeout: float = 20.0) -> int:
    """Repeat ``call`` while it answers a transient coordinator code; return the final code."""
    deadline = time.monotonic() + timeout
    while True:
        code = call()
        if code not in TRANSIENT or time.monotonic() > deadline:
            return int(code)
        time.sleep(0.1)


READ_UNCOMMITTED, READ_COMMITTED = 0, 1


# The request versions a transactional client speaks: transaction version 1 as before KIP-890, and
# with KIP-890 part 1's versions (TRANSACTION_ABORTABLE understood).
LEGACY_VERSIONS = {"init": 4, "add": 3, "add_offsets": 3, "end": 3, "commit_offsets": 3}
KIP890_VERSIONS = {"init": 5, "add": 3, "add_offsets": 4, "end": 4, "commit_offsets": 4}


class Txn:
    """One transactional producer speaking the raw protocol (so tests control every field).
    ``versions`` (class-wide, a test may swap it) are the versions used when a call names none."""

    versions = LEGACY_VERSIONS

    def __init__(self, wire: Wire, transactional_id: str | None = None, timeout_ms: int = 60_000) -> None:
        self.wire = wire
        self.id = transactional_id or f"txn-{uuid.uuid4().hex[:8]}"
        self.timeout_ms = timeout_ms
        self.pid = -1
        self.epoch = -1
        self.seq: dict[tuple[str, int], int] = {}

    def init(self, version: int | None = None) -> int:
        resp = self.wire.call(InitProducerIdRequest(transactional_id=self.id, transaction_timeout_ms=self.timeout_ms,
                                                    producer_id=-1, producer_epoch=-1), InitProducerIdResponse,
                              version or self.versions["init"])
        if resp.error_code == 0:
            self.pid, self.epoch = resp.producer_id, resp.producer_epoch
            self.seq.clear()
        return int(resp.error_code)

    def add(self, topic: str, *partitions: int, version: int | None = None) -> dict[tuple[str, int], int]:
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.id, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=list(partitions or (0,)))])
        resp = self.wire.call(req, AddPartitionsToTxnResponse, version or self.versions["add"])
        return {(t.name, p.partition_index): p.partition_error_code
                for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}

    def add_offsets(self, group: str, version: int | None = None) -> int:
        return int(self.wire.call(AddOffsetsToTxnRequest(transactional_id=self.id, producer_id=self.pid,
                                                         producer_epoch=self.epoch, group_id=group),
                                  AddOffsetsToTxnResponse, version or self.versions["add_offsets"]).error_code)

    def produce(self, topic: str, values: list[bytes], partition: int = 0) -> ProduceResponse.PartitionProduceResponse:
        seq = self.seq.get((topic, partition), 0)
        batch = build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], producer_id=self.pid,
                            producer_epoch=self.epoch, base_sequence=seq, transactional=True)
        req = ProduceRequest(transactional_id=self.id, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        part = self.wire.call(req, ProduceResponse, 9).responses[0].partition_responses[0]
        if part.error_code == 0:
            self.seq[(topic, partition)] = seq + len(values)
        return part

    def commit_offsets(self, group: str, topic: str, offset: int, *, generation: int = -1,
                       member: str = "") -> int:
        req = TxnOffsetCommitRequest(transactional_id=self.id, group_id=group, producer_id=self.pid,
                                     producer_epoch=self.epoch, generation_id=generation, member_id=member,
                                     topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                                         TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                                             partition_index=0, committed_offset=offset, committed_metadata="")])])
        return int(self.wire.call(req, TxnOffsetCommitResponse,
                                  self.versions["commit_offsets"]).topics[0].partitions[0].error_code)

    def end(self, commit: bool, version: int | None = None) -> int:
        return int(self.wire.call(EndTxnRequest(transactional_id=self.id, producer_id=self.pid,
                                                producer_epoch=self.epoch, committed=commit),
                                  EndTxnResponse, version or self.versions["end"]).error_code)


def fetch(wire: Wire, topic: str, isolation: int, offset: int = 0, partition: int = 0) -> FetchResponse.PartitionData:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return wire.call(req, FetchResponse, 12).responses[0].partitions[0]


def visible_values(wire: Wire, topic: str, partition: int = 0) -> list[bytes]:
    """What a read_committed consumer delivers: data below the LSO, minus aborted transactions."""
    part = fetch(wire, topic, READ_COMMITTED, partition=partition)
    # As Kafka's consumer does: an aborted transaction starts at its first offset and ends at the
    # producer's next control batch.
    pending = sorted((a.first_offset, a.producer_id) for a in part.aborted_transactions or [])
    aborting: set[int] = set()
    out: list[bytes] = []
    for batch in iter_batches(bytes(part.records or b"")):
        while pending and pending[0][0] <= batch.last_offset:
            aborting.add(pending.pop(0)[1])
        if batch.is_control:
            aborting.discard(batch.producer_id)
            continue
        if batch.producer_id in aborting:
            continue
        out += [r.value for r in decode_records(batch) if r.value is not None]
    return out


def latest(wire: Wire, topic: str, isolation: int, partition: int = 0) -> int:
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
    return int(wire.call(req, ListOffsetsResponse, 7).topics[0].partitions[0].offset)


def describe(wire: Wire, txn_id: str) -> DescribeTransactionsResponse.TransactionState:
    return wire.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), DescribeTransactionsResponse,
                     0).transaction_states[0]


