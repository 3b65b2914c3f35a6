"""Group join to first record: the KIP-848 consumer protocol against the classic protocol, same broker,
same client (librdkafka through confluent-kafka), one run.

    python benchmarks/bench_848_join.py [--trials 3] [--initial-delay-ms 3000]

A ``grete serve`` subprocess with its defaults (``group.initial.rebalance.delay.ms`` is Kafka's 3000
unless given); a topic of 6 partitions holding one record each. Each trial starts one consumer in a
new group per protocol (alternating, classic first) and times ``subscribe`` to the first record
``poll`` returns. Prints each trial and the median per protocol; writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from grete.testing import broker  # noqa: E402

PARTITIONS = 6


def join_to_first_record(bootstrap: str, topic: str, protocol: str) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{protocol}-{uuid.uuid4().hex[:8]}",
                  "group.protocol": protocol, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        started = time.perf_counter()
        c.subscribe([topic])
        while True:
            m = c.poll(0.01)
            if m is not None and m.error() is None:
                return time.perf_counter() - started
            if time.perf_counter() - started > 60:
                raise SystemExit(f"{protocol}: no record within 60 s")
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--initial-delay-ms", type=int, default=3000,
                        help="group.initial.rebalance.delay.ms (classic groups only; Kafka's default 3000)")
    args = parser.parse_args()
    overrides = {"group.initial.rebalance.delay.ms": str(args.initial_delay_ms)}
    with broker(overrides, subprocess=True) as b:
        topic = f"bench848-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(PARTITIONS):
            p.produce(topic, b"x", partition=i)
        p.flush(30)
        del p, admin  # no reconnect chatter from idle clients when the broker stops
        times: dict[str, list[float]] = {"classic": [], "consumer": []}
        for trial in range(args.trials):
            for protocol in times:
                seconds = join_to_first_record(b.bootstrap_servers, topic, protocol)
                times[protocol].append(seconds)
                print(f"trial {trial + 1}: {protocol:8} {seconds * 1000:7.0f} ms", flush=True)
        for protocol, values in times.items():
            print(f"{protocol:8} median {statistics.median(values) * 1000:7.0f} ms "
                  f"[{min(values) * 1000:.0f}..{max(values) * 1000:.0f}] over {len(values)} trials")


if __name__ == "__main__":
    main()
