"""Kafka Streams (from Maven Central, 3.9 and 4.x) running our word count (tools/java/StreamsWordCount.java)
with processing.guarantee=exactly_once_v2, unchanged, against the broker: the counts are exact, also
when the application is SIGKILLed mid-stream and restarted on the same application id and state dir.

With the record cache off, every word occurrence yields one update, so the committed updates of a
word must be exactly 1, 2, ..., n: a replay after the crash that leaked into committed output would
show as a repeated or skipped count.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tools import kafka_dist

pytestmark = [pytest.mark.compat, pytest.mark.slow]

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
PARTITIONS = 2
# Streams' consumer leaves the group 6 s after a crash instead of 45 s; the rest are the defaults.
APP_CONFIGS = ("session.timeout.ms=6000", "heartbeat.interval.ms=1000", "num.stream.threads=1")


def lines_for(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS).upper() if rng.random() < 0.2 else rng.choice(WORDS)
                     for _ in range(rng.randint(1, 6))) + rng.choice(["", ".", "!"]) for _ in range(n)]


def produce_lines(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce(topic, key=f"line-{i}".encode(), value=line.encode())
    assert p.flush(30) == 0


def committed_updates(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every (word, count) update in the output that read_committed can see, in log order per word."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wc-audit-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    updates: dict[str, list[int]] = {}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + 20
        while len(at_eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.3):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    raise AssertionError(f"audit consumer: {m.error()}")
                at_eof.discard(m.partition())
                (count,) = struct.unpack(">q", m.value())
                updates.setdefault(m.key().decode(), []).append(count)
    finally:
        c.close()
    return updates


class WordCountApp:
    """One run of the Streams application as a JVM process."""

    def __init__(self, version: str, bootstrap: str, src: str, dst: str, app_id: str, workdir: Path) -> None:
        self.version = version
        self.args = [bootstrap, src, dst, app_id, str(workdir / "state"), *APP_CONFIGS]
        self.log = workdir / "app.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = kafka_dist.java_cmd(self.version, "StreamsWordCount", *self.args, log_level="WARN",
                                  classpath_first=str(kafka_dist.harness_classes(self.version)))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:]) if self.log.exists() else ""


def wait_for(cond, timeout: float, app: WordCountApp, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert app.alive(), f"the Streams app exited ({app.proc.returncode if app.proc else None}):\n{app.tail()}"
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached within {timeout}s; app log:\n{app.tail()}")


def expected_counts(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in line.lower().replace(".", " ").replace("!", " ").split())


def check_exact(updates: dict[str, list[int]], expected: Counter[str]) -> None:
    assert set(updates) == set(expected)
    for word, n in expected.items():
        assert updates[word] == list(range(1, n + 1)), f"{word}: committed updates {updates[word]}"


@pytest.mark.timeout(300)
def test_word_count_exactly_once_survives_sigkill(java_client, broker, make_topic, tmp_path) -> None:
    src, dst = make_topic(partitions=PARTITIONS), make_topic(partitions=PARTITIONS)
    rng = random.Random(5)
    first, second, third = lines_for(rng, 150), lines_for(rng, 150), lines_for(rng, 150)
    app = WordCountApp(java_client.version, broker.bootstrap, src, dst, f"wc-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        produce_lines(broker.bootstrap, src, first)
        app.start()
        wait_for(lambda: sum(map(len, committed_updates(broker.bootstrap, dst).values()))
                 == sum(expected_counts(first).values()), 120, app, "counts of the first lines")
        check_exact(committed_updates(broker.bootstrap, dst), expected_counts(first))

        # Kill the application while it works through the second lot (SIGKILL: no clean close, its
        # open transaction is left to the broker and to the next incarnation).
        produce_lines(broker.bootstrap, src, second)
        time.sleep(0.3)
        app.kill()
        produce_lines(broker.bootstrap, src, third)
        app.start()
        everything = expected_counts(first + second + third)
        wait_for(lambda: sum(map(len, committed_updates(broker.bootstrap, dst).values()))
                 >= sum(everything.values()), 150, app, "counts of all lines after the restart")
        time.sleep(1.0)  # anything beyond the exact total would show up now
        check_exact(committed_updates(broker.bootstrap, dst), everything)
    finally:
        app.kill()
