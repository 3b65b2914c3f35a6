"""KafkaJS producer and consumer: codecs, keys, headers, timestamps, idempotence, record size limit."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from tools.client_drivers import batch_codecs, check_idempotent_batches, librdkafka_read

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PREFIX = "value-" + "abcd" * 40 + "-"  # compressible


def records(lines):
    return [x for x in lines if "value" in x]


@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_codec_round_trip(kafkajs, broker, make_topic, codec):
    topic = make_topic(partitions=1)
    (ack,) = kafkajs.ok("produce", topic=topic, count=40, codec=codec, prefix=PREFIX)
    assert ack == {"partition": 0, "base_offset": 0, "error_code": 0}
    assert set(batch_codecs(broker.log_dirs, topic)) == {codec}
    got = records(kafkajs.ok("consume", topic=topic, count=40))
    assert [(x["offset"], x["value"]) for x in got] == [(i, f"{PREFIX}{i}") for i in range(40)]
    assert [v for _p, _o, _k, v in librdkafka_read(broker.bootstrap, topic, 40)] == \
        [f"{PREFIX}{i}".encode() for i in range(40)]


def test_kafkajs_lz4_linked_blocks_refused(kafkajs, broker, make_topic):
    """lz4js's frames as it writes them (BLOCK_INDEPENDENCE clear): valid LZ4, but Kafka's lz4 reader
    refuses them and Produce answers UNKNOWN_SERVER_ERROR; nothing is stored."""
    topic = make_topic(partitions=1)
    (refused,) = kafkajs.ok("produce", topic=topic, count=5, codec="lz4", prefix=PREFIX, lz4_linked=True)
    assert refused["error_code"] == -1, refused  # UNKNOWN_SERVER_ERROR
    (ack,) = kafkajs.ok("produce", topic=topic, count=5, codec="lz4", prefix=PREFIX)
    assert ack == {"partition": 0, "base_offset": 0, "error_code": 0}


def test_kafkajs_reads_librdkafka_codecs(kafkajs, make_topic, produce):
    """KafkaJS decodes batches another client compressed (librdkafka's framing of each codec)."""
    topic = make_topic(partitions=1)
    for codec in CODECS:
        produce(topic, [(None, f"{codec}-{i}-{PREFIX}".encode()) for i in range(5)], partition=0,
                **{"compression.codec": codec})
    got = records(kafkajs.ok("consume", topic=topic, count=25))
    assert [x["value"] for x in got] == [f"{c}-{i}-{PREFIX}" for c in CODECS for i in range(5)]


def test_kafkajs_keys_headers_timestamps(kafkajs, broker, make_topic):
    topic = make_topic(partitions=3)
    base = int(time.time() * 1000) - 600_000  # in the past: brokers refuse timestamps far ahead
    kafkajs.ok("produce", topic=topic, count=30, keys=5, headers=True, ts=base)
    got = records(kafkajs.ok("consume", topic=topic, count=30))
    assert sorted(x["value"] for x in got) == sorted(f"v{i}" for i in range(30))
    key_partition: dict[str, set[int]] = {}
    for x in got:
        i = int(x["value"][1:])
        assert x["key"] == f"k{i % 5}"
        assert x["headers"] == [["n", str(i)], ["dup", "a"], ["dup", "b"]]
        assert x["timestamp"] == base + i
        key_partition.setdefault(x["key"], set()).add(x["partition"])
    assert all(len(ps) == 1 for ps in key_partition.values()), key_partition
    # KafkaJS 2's default partitioner is Java's murmur2, as is librdkafka's murmur2_random.
    delivered: dict[str, int] = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key in key_partition:
        p.produce(topic, key=key.encode(), value=b"x",
                  on_delivery=lambda err, m: delivered.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0
    assert delivered == {k: ps.pop() for k, ps in key_partition.items()}


def test_kafkajs_idempotent_producer(kafkajs, broker, make_topic):
    topic = make_topic(partitions=3)
    acks = kafkajs.ok("produce", topic=topic, count=300, keys=7, idempotent=True)
    assert sorted(a["partition"] for a in acks) == [0, 1, 2] and all(a["error_code"] == 0 for a in acks)
    got = librdkafka_read(broker.bootstrap, topic, 300)
    assert sorted(v for *_x, v in got) == sorted(f"v{i}".encode() for i in range(300))
    check_idempotent_batches(broker.log_dirs, topic, 3)  # one producer id, sequences from 0 without gaps


def test_kafkajs_oversized_record_refused(kafkajs, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "2048"})
    big, small = kafkajs.ok("oversize", topic=topic, size=8000)
    assert big["error_code"] == 10, big  # MESSAGE_TOO_LARGE
    assert small == {"step": "small", "partition": 0, "offset": 0}  # nothing was appended before it
