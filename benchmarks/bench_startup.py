"""Start-up time of ``grete serve``: process start to the first answered ApiVersions request.

    python benchmarks/bench_startup.py [--runs 7]

Two cases: a fresh data dir, and a restart after a clean stop with ``__consumer_offsets`` (50
partitions) and one user topic on disk. Target (issue: single-node broker): serving within 0.3 s.
Prints median [min..max] per case; writes nothing.
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

API_VERSIONS_V0 = struct.pack(">ihhih", 14, 18, 0, 1, 4) + b"bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_to_first_response(data: Path, port: int) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--log-level", "WARNING",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                             "--override", f"log.dirs={data}"])
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(API_VERSIONS_V0)
                    if s.recv(4):
                        return time.perf_counter() - started
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"grete serve exited with {proc.returncode}") from None
                time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def prepare_restart_dir(data: Path, port: int) -> None:
    """Create the offsets topic and a user topic, then stop cleanly."""
    from confluent_kafka import Consumer, Producer

    proc = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--log-level", "WARNING",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                             "--override", f"log.dirs={data}"])
    try:
        time.sleep(1.0)
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        for i in range(1000):
            producer.produce("bench-startup", value=b"%d" % i)
        producer.flush(30)
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench"})
        consumer.subscribe(["bench-startup"])
        consumer.consume(10, 5)
        consumer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def summary(samples: list[float]) -> str:
    return (f"median {statistics.median(samples) * 1000:.0f} ms "
            f"[{min(samples) * 1000:.0f}..{max(samples) * 1000:.0f}] over {len(samples)} runs")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    port = free_port()
    fresh = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            fresh.append(time_to_first_response(Path(tmp), port))
    with tempfile.TemporaryDirectory() as tmp:
        prepare_restart_dir(Path(tmp), port)
        restart = [time_to_first_response(Path(tmp), port) for _ in range(args.runs)]
    target = 0.3
    for name, samples in (("fresh data dir", fresh), ("restart, 51 partitions", restart)):
        met = "met" if statistics.median(samples) <= target else "NOT met"
        print(f"{name:24s} {summary(samples)}  (target <= {target * 1000:.0f} ms: {met})")


if __name__ == "__main__":
    main()
