"""What a connection costs the broker: RSS per idle connection, and what connections that announce
huge frames and send little do to RSS (docs/benchmarks.md, "Connection cost").

    python -m benchmarks.bench_connections [--idle 5000] [--claimers 1000]
    python -m benchmarks.bench_connections --churn 3000 [--rounds 3]

Starts ``grete serve`` as a child process (so its RSS is its own), opens ``--idle`` connections that
send one ApiVersions request and then stay silent, reads the broker's RSS from /proc before and
after; then opens ``--claimers`` connections that each announce a frame of socket.request.max.bytes
(100 MB) and send 1 KB of it. Prints JSON.

``--churn N`` measures what outlives connections instead: ``--rounds`` times, N connections open
(each sends one ApiVersions request), wait for their answers and close; the broker's RSS after each
round against the start. Growth that stops after the first round is the allocator keeping its high
water mark; growth every round is state that outlives its connection.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_versions_frame() -> bytes:
    # ApiVersions v0: api key 18, version 0, correlation id 1, client id "b".
    body = struct.pack(">hhih", 18, 0, 1, 1) + b"b"
    return struct.pack(">i", len(body)) + body


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port}")


def settle(pid: int) -> int:
    time.sleep(1.5)
    return rss_kb(pid)


def churn(port: int, pid: int, count: int, rounds: int) -> dict[str, object]:
    base = settle(pid)
    after = []
    frame = api_versions_frame()
    for _ in range(rounds):
        socks = []
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(frame)
            socks.append(s)
        for s in socks:
            s.recv(65536)
        for s in socks:
            s.close()
        after.append(settle(pid))
    return {"connections_per_round": count, "rss_base_kb": base, "rss_after_rounds_kb": after,
            "growth_kb": [kb - base for kb in after]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=int, default=5000)
    parser.add_argument("--claimers", type=int, default=1000)
    parser.add_argument("--churn", type=int, default=0, help="open and close this many connections a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--override",
                                  f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
                                  "--log-level", "WARNING"], preexec_fn=lambda: resource.setrlimit(
                                      resource.RLIMIT_NOFILE, (hard, hard)))
        try:
            wait_for_port(port, 30)
            if args.churn:
                print(json.dumps(churn(port, child.pid, args.churn, args.rounds), indent=1))
                return
            base = settle(child.pid)
            idle = []
            frame = api_versions_frame()
            for _ in range(args.idle):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(frame)
                idle.append(s)
            for s in idle:
                s.recv(65536)
            with_idle = settle(child.pid)
            claimers = []
            for _ in range(args.claimers):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 1020)
                claimers.append(s)
            with_claimers = settle(child.pid)
            result = {
                "idle_connections": args.idle, "rss_base_kb": base, "rss_idle_kb": with_idle,
                "kb_per_idle_connection": round((with_idle - base) / max(args.idle, 1), 2),
                "claimers": args.claimers, "bytes_sent_per_claimer": 1024,
                "rss_after_claimers_kb": with_claimers,
                "kb_per_claimer": round((with_claimers - with_idle) / max(args.claimers, 1), 2),
            }
            print(json.dumps(result, indent=1))
            for s in idle + claimers:
                s.close()
        finally:
            child.terminate()
            child.wait(30)


if __name__ == "__main__":
    if os.path.exists("/proc/self/status"):
        main()
    else:
        sys.exit("needs Linux /proc")
