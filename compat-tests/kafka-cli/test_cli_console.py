"""Console producer -> console consumer round trips, consumer groups, and the perf tools."""

from __future__ import annotations

import re
import uuid

import pytest

from tools.client_drivers import partition_dir

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def consume_lines(kafka_cli, topic: str, count: int, *extra: str) -> list[str]:
    out = kafka_cli.ok("kafka-console-consumer", "--topic", topic, "--from-beginning",
                       "--max-messages", str(count), "--timeout-ms", "30000", *extra)
    return out.splitlines()


@pytest.mark.parametrize("codec", CODECS)
def test_console_round_trip(kafka_cli, fresh_topic, codec):
    # Keyed lines, some repeated keys, one empty value: the tools' parse.key path end to end.
    lines = [f"key-{i % 3}:value {i} {uuid.uuid4().hex}" for i in range(20)] + ["key-x:"]
    rp, fp = kafka_cli.reader_property(), kafka_cli.formatter_property()
    kafka_cli.ok("kafka-console-producer", "--topic", fresh_topic, "--compression-codec", codec,
                 rp, "parse.key=true", rp, "key.separator=:", input="\n".join(lines) + "\n")
    got = consume_lines(kafka_cli, fresh_topic, len(lines), fp, "print.key=true", fp, "key.separator=:")
    assert got == lines  # one partition: order is the produce order


def test_console_consumer_group_offsets(kafka_cli, fresh_topic, produce):
    produce(fresh_topic, [(None, f"m{i}".encode()) for i in range(7)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    got = consume_lines(kafka_cli, fresh_topic, 7, "--group", group)
    assert got == [f"m{i}" for i in range(7)]

    assert group in kafka_cli.ok("kafka-consumer-groups", "--list").split()

    desc = kafka_cli.ok("kafka-consumer-groups", "--describe", "--group", group)
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: the consumer committed on close.
    row = next((ln.split() for ln in desc.splitlines() if ln.startswith(group) and fresh_topic in ln), None)
    assert row is not None, desc
    assert row[1:6] == [fresh_topic, "0", "7", "7", "0"], desc


def test_consumer_group_reset_offsets(kafka_cli, fresh_topic, produce):
    produce(fresh_topic, [(None, f"m{i}".encode()) for i in range(5)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    consume_lines(kafka_cli, fresh_topic, 5, "--group", group)
    kafka_cli.ok("kafka-consumer-groups", "--group", group, "--topic", fresh_topic,
                 "--reset-offsets", "--to-offset", "2", "--execute")
    # The group resumes at the reset position.
    assert consume_lines(kafka_cli, fresh_topic, 3, "--group", group) == ["m2", "m3", "m4"]


def test_dump_log_reads_the_segment(kafka_cli, broker, fresh_topic, produce):
    values = [f"payload-{i}".encode() for i in range(10)]
    produce(fresh_topic, [(f"k{i}".encode(), v) for i, v in enumerate(values)])
    segment = partition_dir(broker.log_dirs, fresh_topic, 0) / "00000000000000000000.log"
    assert segment.is_file(), sorted(p.name for p in broker.log_dir.iterdir())
    out = kafka_cli.ok("kafka-dump-log", "--files", str(segment), "--print-data-log", bootstrap_flag=False)
    # Record lines start with "| offset: N" (the header line "Log starting offset" must not count).
    offsets = [int(m) for m in re.findall(r"^\| offset: (\d+)", out, re.M)]
    assert offsets == list(range(10)), out
    payloads = re.findall(r"payload: (\S+)", out)
    assert payloads == [v.decode() for v in values], out
    assert "isvalid: true" in out and "isvalid: false" not in out
    assert sum(int(c) for c in re.findall(r"\bcount: (\d+)", out)) == 10


def test_producer_and_consumer_perf(kafka_cli, fresh_topic):
    n = 20000
    out = kafka_cli.ok("kafka-producer-perf-test", "--topic", fresh_topic, "--num-records", str(n),
                       "--record-size", "100", "--throughput", "-1",
                       "--producer-props", f"bootstrap.servers={kafka_cli.broker.bootstrap}", "acks=all",
                       bootstrap_flag=False)
    assert re.search(rf"^{n} records sent", out, re.M), out
    out = kafka_cli.ok("kafka-consumer-perf-test", "--topic", fresh_topic, "--messages", str(n),
                       "--timeout", "30000")
    # CSV-ish: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    last = out.strip().splitlines()[-1].split(",")
    assert int(last[4].strip()) == n, out
