"""A produce refused record by record names each record and why, as Kafka 4.3.1 does: a record
without a key on a compacted topic is INVALID_RECORD, its batch index listed with Kafka's message
naming the topic partition, and the partition's message summing the record errors up."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import ProduceRequest, ProduceResponse  # noqa: E402
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.testing._wire import call  # noqa: E402


def test_keyless_records_on_a_compacted_topic(broker, make_topic):
    topic = make_topic(config={"cleanup.policy": "compact"})
    records = [Record(0, 0, b"k", b"kept"), Record(1, 0, None, b"no key"), Record(2, 0, None, b"no key")]
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=build_batch(records))])])
    host, port = broker.address
    answer = call(host, int(port), request, ProduceResponse, 9).responses[0].partition_responses[0]
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [(1, message), (2, message)]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{message}')" for i in (1, 2))
    assert answer.error_message == ("One or more records have been rejected due to 2 record errors in total, and "
                                    f"only showing the first three errors at most: [{shown}]")
