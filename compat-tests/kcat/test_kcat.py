"""kcat (librdkafka's command-line client, Debian package) against the broker."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

pytestmark = [pytest.mark.compat,
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)")]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(bootstrap: str, *args: str, input: str | None = None, timeout: float = 30.0) -> str:
    """Run kcat; fail the test with its stderr on a non-zero exit."""
    done = subprocess.run(["kcat", "-b", bootstrap, "-q", *args], input=input, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def consume(bootstrap: str, topic: str, *args: str, fmt: str = "%k=%s\\n") -> list[str]:
    """Consume from the given offsets until the end of every partition (-e)."""
    out = kcat(bootstrap, "-C", "-t", topic, "-e", "-f", fmt, *args)
    return out.splitlines()


def test_metadata_listing(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    md = json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic))
    assert len(md["brokers"]) == broker.nodes
    (t,) = md["topics"]
    assert t["topic"] == topic and "error" not in t
    parts = sorted(t["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [0, 1, 2]
    broker_ids = {b["id"] for b in md["brokers"]}
    # Replication factor 1: each partition led by a listed broker, its only replica (on a cluster the
    # partitions spread over the brokers; on a single node they are all its own).
    assert all(p["leader"] in broker_ids and [r["id"] for r in p["replicas"]] == [p["leader"]] for p in parts)
    text = kcat(broker.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 3 partitions' in text


def test_keyed_produce_consume_round_trip(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    lines = "".join(f"key{i}:value {i}\n" for i in range(10))
    kcat(broker.bootstrap, "-P", "-t", topic, "-K", ":", input=lines)
    got = consume(broker.bootstrap, topic, "-o", "beginning", fmt="%k|%s|%o\\n")
    assert got == [f"key{i}|value {i}|{i}" for i in range(10)]


def test_null_key_and_value_with_Z(broker, make_topic: Callable[..., str]) -> None:
    """-Z sends empty keys/values as NULL; -f %K/%S print -1 for NULL lengths."""
    topic = make_topic()
    kcat(broker.bootstrap, "-P", "-Z", "-t", topic, "-K", ":", input="k1:\n:v2\nk3:v3\n")
    got = consume(broker.bootstrap, topic, "-o", "beginning", fmt="%K/%S\\n")
    assert got == ["2/-1", "-1/2", "2/2"]


def test_offsets(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    kcat(broker.bootstrap, "-P", "-t", topic, input="".join(f"m{i}\n" for i in range(10)))
    fmt = "%s\\n"
    assert consume(broker.bootstrap, topic, "-o", "beginning", fmt=fmt) == [f"m{i}" for i in range(10)]
    assert consume(broker.bootstrap, topic, "-o", "7", fmt=fmt) == ["m7", "m8", "m9"]
    assert consume(broker.bootstrap, topic, "-o", "-2", fmt=fmt) == ["m8", "m9"]  # relative to the end
    assert consume(broker.bootstrap, topic, "-o", "end", fmt=fmt) == []
    assert consume(broker.bootstrap, topic, "-o", "3", "-c", "2", fmt=fmt) == ["m3", "m4"]


def test_offset_by_timestamp(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    kcat(broker.bootstrap, "-P", "-t", topic, input="early\n")
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(broker.bootstrap, "-P", "-t", topic, input="late1\nlate2\n")
    assert consume(broker.bootstrap, topic, "-o", f"s@{cut}", fmt="%s\\n") == ["late1", "late2"]


def test_partition_and_headers(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "2", "-H", "h1=v1", "-H", "h2=v2", input="hello\n")
    got = consume(broker.bootstrap, topic, "-o", "beginning", fmt="%p %h %s\\n")
    assert got == ["2 h1=v1,h2=v2 hello"]


@pytest.mark.parametrize("codec", CODECS)
def test_compression_codec(broker, make_topic: Callable[..., str], codec: str) -> None:
    topic = make_topic()
    lines = [f"record-{i:03d}-" + "compressible" * 8 for i in range(100)]
    kcat(broker.bootstrap, "-P", "-t", topic, "-X", f"compression.codec={codec}", "-X", "linger.ms=50",
         input="\n".join(lines) + "\n")
    got = consume(broker.bootstrap, topic, "-o", "beginning", fmt="%o %s\\n")
    assert got == [f"{i} {line}" for i, line in enumerate(lines)]


def test_producer_reports_broker_refusal(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"max.message.bytes": "1024"})
    done = subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic], input="x" * 5000 + "\n",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "too large" in done.stderr.lower() or "MSG_SIZE_TOO_LARGE" in done.stderr


def test_consumer_group_mode(broker, make_topic: Callable[..., str]) -> None:
    """-G: balanced consumer group (subscribe); commits, so a second run sees only new records."""
    topic = make_topic(partitions=2)
    group = f"kcat-{topic}"
    kcat(broker.bootstrap, "-P", "-t", topic, "-K", ":", input="".join(f"k{i}:v{i}\n" for i in range(6)))
    args = ("-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true",
            "-X", "auto.commit.interval.ms=100", "-e", "-f", "%s\\n", "-G", group, topic)
    first = subprocess.run(["kcat", "-b", broker.bootstrap, "-q", *args], capture_output=True, text=True,
                           timeout=60)
    assert first.returncode == 0, first.stderr
    assert sorted(first.stdout.split()) == [f"v{i}" for i in range(6)]
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", input="new\n")
    second = subprocess.run(["kcat", "-b", broker.bootstrap, "-q", *args], capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["new"]
