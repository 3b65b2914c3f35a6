"""Broker CPU per request on the hot paths, for before/after comparisons on a noisy machine.

    python -m benchmarks.bench_request_cpu [--root OTHER_CHECKOUT] [--requests 100000]

Starts ``grete serve`` (from this checkout, or from ``--root``) as a child process, creates a topic,
then sends pre-encoded requests over one connection with 100 in flight and reads every answer:
small Produce requests (one batch of one 100-byte record, acks=1), then empty Fetch requests
(max_wait_ms=0) at the log end, the repeated empty fetch of an idle consumer. Reports the broker's CPU time per request (utime+stime from /proc), which does not
depend on how busy the rest of the machine is the way throughput does. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grete.protocol.codec import Writer
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from grete.protocol.records.record import Record, build_batch

IN_FLIGHT = 100


def cpu_seconds(pid: int) -> float:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists() and children.read_text().split():  # under a profiler: the broker is its child
        pid = int(children.read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def frame(api_key: int, version: int, correlation_id: int, request: object) -> bytes:
    w = Writer()
    size = w.reserve_int32()
    encode_request_header(w, RequestHeader(api_key=api_key, api_version=version, correlation_id=correlation_id, client_id="bench"))
    request.encode(w, version)  # type: ignore[attr-defined]
    w.patch_int32(size, w.nbytes - 4)
    return w.getvalue()


def read_answer(sock: socket.socket, buf: bytearray) -> None:
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf.extend(chunk)
    del buf[:4 + struct.unpack_from(">i", buf)[0]]


def run(sock: socket.socket, frames: list[bytes], pid: int) -> float:
    buf = bytearray()
    before = cpu_seconds(pid)
    sent = received = 0
    while received < len(frames):
        while sent < len(frames) and sent - received < IN_FLIGHT:
            sock.sendall(frames[sent])
            sent += 1
        read_answer(sock, buf)
        received += 1
    return (cpu_seconds(pid) - before) / len(frames) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="", help="another grete checkout to run instead of this one")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--prefix", default="", help="command prefix for the broker (a profiler)")
    parser.add_argument("--records", type=int, default=1, help="100-byte records per produced batch")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    root = Path(args.root).resolve() if args.root else Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = str(root)
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen([*shlex.split(args.prefix), sys.executable, "-m", "grete.cli", "serve", "--override",
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
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            batch = bytes(build_batch([Record(i, 0, None, b"x" * 100) for i in range(args.records)],
                                      base_timestamp=int(time.time() * 1000)))
            produce = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
                name="bench", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
            create = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="bench", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=30000, validate_only=False)
            run(sock, [frame(19, 5, 0, create)], child.pid)
            warm = [frame(0, 9, i, produce) for i in range(2000)]
            run(sock, warm, child.pid)
            produce_us = run(sock, [frame(0, 9, i, produce) for i in range(args.requests)], child.pid)
            fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                 session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                     topic="bench", partitions=[FetchRequest.FetchPartition(
                                         partition=0, fetch_offset=(len(warm) + args.requests) * args.records,
                                         partition_max_bytes=1 << 20)])])
            fetch_us = run(sock, [frame(1, 12, i, fetch) for i in range(args.requests)], child.pid)
            print(json.dumps({"root": str(root), "requests": args.requests, "records_per_batch": args.records,
                              "produce_cpu_us_per_request": round(produce_us, 2),
                              "fetch_cpu_us_per_request": round(fetch_us, 2)}))
            sock.close()
        finally:
            child.terminate()
            child.wait(30)


if __name__ == "__main__":
    main()
