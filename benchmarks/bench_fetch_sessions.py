"""Broker CPU per Fetch of an idle consumer with many partitions: full fetches against an incremental
fetch session (KIP-227), and what each costs per idle partition.

    python -m benchmarks.bench_fetch_sessions [--partitions 1,100,1000] [--requests 5000]

Starts ``grete serve`` as a child process, creates one topic per partition count, then for each
sends pre-encoded Fetch v12 requests (max_wait_ms=0, every partition at its log end) over one
connection with 100 in flight and reads every answer, in three modes:

- ``full_repeat``: the same sessionless full fetch (epoch -1) again and again, as librdkafka sends
  it; the connection answers an identical repeat from its memo while nothing changed;
- ``full``: sessionless full fetches that differ (two alternating max_bytes), so each one is read
  and encoded: what a full fetch costs when the memo cannot help;
- ``incremental``: one full fetch with epoch 0 opens a session, then incremental fetches (epochs
  1, 2, ...) name no partition: the broker reads the session's partitions and answers none.

Reports broker CPU µs per request (utime+stime from /proc) and, from the largest and smallest
partition counts, the CPU per idle partition of each mode. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_request_cpu import frame, run
from grete.protocol.codec import Reader
from grete.protocol.messages import CreateTopicsRequest, FetchRequest, FetchResponse

VERSION = 12


def fetch_request(topic: str, partitions: int, *, session_id: int = 0, epoch: int = -1, max_bytes: int = 1 << 20,
                  named: bool = True) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                        session_id=session_id, session_epoch=epoch, topics=[FetchRequest.FetchTopic(
                            topic=topic, partitions=[FetchRequest.FetchPartition(
                                partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                                for p in range(partitions)])] if named else [])


def call(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    head = _exact(sock, 4)
    return _exact(sock, int.from_bytes(head, "big"))


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def open_session(sock: socket.socket, topic: str, partitions: int) -> int:
    answer = Reader(call(sock, frame(1, VERSION, 0, fetch_request(topic, partitions, epoch=0))))
    answer.int32()  # correlation id
    answer.tagged_fields()
    response = FetchResponse.decode(answer, VERSION)
    assert response.error_code == 0 and response.session_id != 0, response
    return int(response.session_id)


def measure(sock: socket.socket, pid: int, topic: str, partitions: int, requests: int) -> dict[str, Any]:
    repeat = frame(1, VERSION, 1, fetch_request(topic, partitions))
    full_repeat = run(sock, [repeat] * requests, pid)
    differing = [frame(1, VERSION, i, fetch_request(topic, partitions, max_bytes=(1 << 20) + i % 2))
                 for i in range(requests)]
    full = run(sock, differing, pid)
    session = open_session(sock, topic, partitions)
    incremental_frames = [frame(1, VERSION, i, fetch_request(topic, partitions, session_id=session, epoch=i + 1,
                                                             named=False)) for i in range(requests)]
    incremental = run(sock, incremental_frames, pid)
    return {"partitions": partitions, "full_repeat_cpu_us": round(full_repeat, 2), "full_cpu_us": round(full, 2),
            "incremental_cpu_us": round(incremental, 2), "full_request_bytes": len(differing[0]),
            "incremental_request_bytes": len(incremental_frames[0])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="1,100,1000")
    parser.add_argument("--requests", type=int, default=5000)
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--override",
                                  f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
                                  "--log-level", "WARNING"], cwd=root, env=env)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    sock = socket.create_connection(("127.0.0.1", port))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            create = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name=f"idle-{n}", num_partitions=n, replication_factor=1, assignments=[], configs=[])
                for n in counts], timeout_ms=60000, validate_only=False)
            run(sock, [frame(19, 5, 0, create)], child.pid)
            measure(sock, child.pid, f"idle-{counts[0]}", counts[0], 500)  # warm-up
            rows = [measure(sock, child.pid, f"idle-{n}", n, args.requests) for n in counts]
            low, high = rows[0], rows[-1]
            span = high["partitions"] - low["partitions"]
            per_partition = {mode: round((high[f"{mode}_cpu_us"] - low[f"{mode}_cpu_us"]) / span, 3)
                             for mode in ("full_repeat", "full", "incremental")} if span else {}
            print(json.dumps({"requests": args.requests, "rows": rows,
                              "cpu_us_per_idle_partition": per_partition}, indent=1))
            sock.close()
        finally:
            child.terminate()
            child.wait(30)


if __name__ == "__main__":
    main()
