"""sarama producer and consumer: codecs, keys, headers, timestamps, idempotence, record size limit."""

from __future__ import annotations

import time

import pytest

from tools.client_drivers import batch_codecs, check_idempotent_batches, librdkafka_read

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Compressible values (franz-go skips a codec that does not shrink a batch; the same values here).
PREFIX = "value-" + "abcd" * 40 + "-"


@pytest.mark.parametrize("codec", CODECS)
def test_sarama_codec_round_trip(sarama_client, broker, make_topic, codec):
    topic = make_topic(partitions=1)
    acks = [x for x in sarama_client.ok("produce", topic=topic, count=40, codec=codec, prefix=PREFIX) if "offset" in x]
    assert [a["offset"] for a in acks] == list(range(40))
    # The batches on disk carry the codec sarama was told to use (the broker keeps them as sent).
    assert set(batch_codecs(broker.log_dirs, topic)) == {codec}
    got = [x for x in sarama_client.ok("consume", topic=topic, count=40) if "value" in x]
    assert [(x["offset"], x["value"]) for x in got] == [(i, f"{PREFIX}{i}") for i in range(40)]
    # Another client decodes the same batches.
    assert [v for _p, _o, _k, v in librdkafka_read(broker.bootstrap, topic, 40)] == \
        [f"{PREFIX}{i}".encode() for i in range(40)]


def test_sarama_keys_headers_timestamps(sarama_client, make_topic):
    topic = make_topic(partitions=3)
    base = int(time.time() * 1000) - 600_000  # in the past: brokers refuse timestamps far ahead
    acks = [x for x in sarama_client.ok("produce", topic=topic, count=30, keys=5, headers=True, ts=base)
            if "offset" in x]
    assert len(acks) == 30
    got = [x for x in sarama_client.ok("consume", topic=topic, count=30) if "value" in x]
    assert sorted(x["value"] for x in got) == sorted(f"v{i}" for i in range(30))
    key_partitions: dict[str, set[int]] = {}
    for x in got:
        i = int(x["value"][1:])
        assert x["key"] == f"k{i % 5}"
        assert x["headers"] == [["n", str(i)], ["dup", "a"], ["dup", "b"]]
        assert x["timestamp"] == base + i
        key_partitions.setdefault(x["key"], set()).add(x["partition"])
    assert all(len(ps) == 1 for ps in key_partitions.values()), key_partitions


def test_sarama_idempotent_producer(sarama_client, broker, make_topic):
    topic = make_topic(partitions=3)
    lines = sarama_client.ok("produce", topic=topic, count=300, keys=7, idempotent=True)
    acks = [x for x in lines if "offset" in x]
    per_partition: dict[int, list[int]] = {}
    for a in acks:
        per_partition.setdefault(a["partition"], []).append(a["offset"])
    for offsets in per_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
    got = librdkafka_read(broker.bootstrap, topic, 300)
    assert sorted(v for *_x, v in got) == sorted(f"v{i}".encode() for i in range(300))
    # The batches on disk: one producer id (sarama does not show it), sequences from 0 without gaps.
    check_idempotent_batches(broker.log_dirs, topic, 3)


def test_sarama_oversized_record_refused(sarama_client, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "2048"})
    big, small = sarama_client.ok("oversize", topic=topic, size=8000)
    assert big["error_code"] == 10, big  # MESSAGE_TOO_LARGE
    assert small == {"step": "small", "partition": 0, "offset": 0}  # nothing was appended before it
