"""kafka-go Writer and Reader: codecs, keys, headers, timestamps, record size limit.
(kafka-go has no idempotent or transactional producer.)"""

from __future__ import annotations

import time

import pytest

from tools.client_drivers import batch_codecs, batch_headers, librdkafka_read

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PREFIX = "value-" + "abcd" * 40 + "-"  # compressible


@pytest.mark.parametrize("codec", CODECS)
def test_kafkago_codec_round_trip(kafkago, broker, make_topic, codec):
    topic = make_topic(partitions=1)
    acks = [x for x in kafkago.ok("produce", topic=topic, count=40, codec=codec, prefix=PREFIX) if "offset" in x]
    assert sorted(a["offset"] for a in acks) == list(range(40))
    assert set(batch_codecs(broker.log_dirs, topic)) == {codec}
    got = [x for x in kafkago.ok("consume", topic=topic, count=40) if "value" in x]
    assert [(x["offset"], x["value"]) for x in got] == [(i, f"{PREFIX}{i}") for i in range(40)]
    assert [v for _p, _o, _k, v in librdkafka_read(broker.bootstrap, topic, 40)] == \
        [f"{PREFIX}{i}".encode() for i in range(40)]


def test_kafkago_keys_headers_timestamps(kafkago, broker, make_topic):
    topic = make_topic(partitions=3)
    base = int(time.time() * 1000) - 600_000  # in the past: brokers refuse timestamps far ahead
    acks = [x for x in kafkago.ok("produce", topic=topic, count=30, keys=5, headers=True, ts=base)
            if "offset" in x]
    assert len(acks) == 30
    got = [x for x in kafkago.ok("consume", topic=topic, count=30) if "value" in x]
    assert sorted(x["value"] for x in got) == sorted(f"v{i}" for i in range(30))
    key_partitions: dict[str, set[int]] = {}
    for x in got:
        i = int(x["value"][1:])
        assert x["key"] == f"k{i % 5}"
        assert x["headers"] == [["n", str(i)], ["dup", "a"], ["dup", "b"]]
        assert x["timestamp"] == base + i
        key_partitions.setdefault(x["key"], set()).add(x["partition"])
    assert all(len(ps) == 1 for ps in key_partitions.values()), key_partitions
    # Not idempotent: kafka-go writes batches without a producer id.
    assert {b["producer_id"] for p in range(3) for b in batch_headers(broker.log_dirs, topic, p)} == {-1}


def test_kafkago_oversized_record_refused(kafkago, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "2048"})
    big, small = kafkago.ok("oversize", topic=topic, size=8000)
    assert big["error_code"] == 10, big  # MESSAGE_TOO_LARGE
    assert small == {"step": "small", "partition": 0, "offset": 0}  # nothing was appended before it
