"""grete/testing/routed_wire.py: where a request goes on a cluster is read from the request as a Kafka
client reads it (the first partition it names, its group, its transaction, including the fields of
versions before KIP-890), and one address gets a plain connection."""

from __future__ import annotations

import socket
import uuid

from grete.protocol.messages import (
    AddPartitionsToTxnRequest,
    DeleteGroupsRequest,
    DescribeProducersRequest,
    FetchRequest,
    InitProducerIdRequest,
    OffsetFetchRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from grete.testing._wire import Wire
from grete.testing.routed_wire import _first_partition, _group_of, _transaction_of, open_wire

TOPIC_ID = uuid.UUID(int=7)


def test_the_first_partition_a_request_names() -> None:
    produce = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[
        ProduceRequest.PartitionProduceData(index=2)])])
    assert _first_partition(produce) == ("t", 2)
    fetch = FetchRequest(topics=[FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[
        FetchRequest.FetchPartition(partition=5)])])
    assert _first_partition(fetch) == (TOPIC_ID, 5)
    assert _first_partition(FetchRequest(topics=[])) is None  # a session's next fetch: where it went before
    producers = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name="p", partition_indexes=[3])])
    assert _first_partition(producers) == ("p", 3)
    markers = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(topics=[
        WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="m", partition_indexes=[1])])])
    assert _first_partition(markers) == ("m", 1)


def test_the_group_and_transaction_a_request_names() -> None:
    assert _group_of(DeleteGroupsRequest(groups_names=["g1", "g2"])) == "g1"
    assert _group_of(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g")])) == "g"
    assert _transaction_of(InitProducerIdRequest(transactional_id=None)) is None  # idempotent: any broker
    legacy = AddPartitionsToTxnRequest(v3_and_below_transactional_id="old")
    assert _transaction_of(legacy) == "old"
    batched = AddPartitionsToTxnRequest(transactions=[
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(transactional_id="new")])
    assert _transaction_of(batched) == "new"


def test_one_address_is_one_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        wire = open_wire(f"127.0.0.1:{port}", timeout=5)
        try:
            assert type(wire) is Wire
        finally:
            wire.close()
