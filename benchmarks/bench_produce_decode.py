"""Cost of validating one 1 MB produce payload (1 KB records, uncompressed).

Measures, per payload:
  * bare crc32c over 1 MB (the floor: what the C CRC costs on its own);
  * validate_produce_records(deep=False): header checks + CRC32C, the broker's hot path;
  * validate_produce_records(deep=True): per-record decoding in Python, for comparison;
  * when grete.protocol.messages.produce exists: decoding a whole ProduceRequest v9 frame
    (request header + body, records as a zero-copy view) followed by header-only validation.

Run: python benchmarks/bench_produce_decode.py [--repeat N]
Prints median [min..max] over the runs, records/s, MB/s, and the ratio to bare CRC.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import time
from collections.abc import Callable

import crc32c

from grete.protocol.records.record import Record, build_batch
from grete.protocol.records.validate import LONG_MAX, validate_produce_records

RECORD_SIZE = 1024
PAYLOAD_TARGET = 1024 * 1024


def make_payload() -> tuple[bytearray, int]:
    value = os.urandom(RECORD_SIZE - 16)
    records: list[Record] = []
    size = 61
    while size + RECORD_SIZE < PAYLOAD_TARGET:
        records.append(Record(len(records), len(records), b"key-%08d" % len(records), value))
        size += RECORD_SIZE
    return build_batch(records, base_timestamp=int(time.time() * 1000), producer_id=1, producer_epoch=0,
                       base_sequence=0), len(records)


def timeit(fn: Callable[[], object], repeat: int, inner: int) -> list[float]:
    """Seconds per call, one sample per repeat (each averaging ``inner`` calls)."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return samples


def report(name: str, samples: list[float], nbytes: int, nrecords: int, floor: float | None) -> float:
    median = statistics.median(samples)
    ratio = f"  {median / floor:6.1f}x crc" if floor else ""
    print(f"{name:<38} {median * 1e6:9.1f} us [{min(samples) * 1e6:.1f}..{max(samples) * 1e6:.1f}]"
          f"  {nrecords / median / 1e6:7.2f} M rec/s  {nbytes / median / 1e6:9.1f} MB/s{ratio}")
    return median


def validator(payload: memoryview, deep: bool) -> Callable[[], object]:
    def run() -> object:
        return validate_produce_records(
            payload, produce_version=9, compacted=False, max_message_bytes=2 * PAYLOAD_TARGET,
            timestamp_type="CreateTime", timestamp_before_max_ms=LONG_MAX, timestamp_after_max_ms=LONG_MAX,
            now_ms=int(time.time() * 1000), deep=deep)
    return run


def frame_decoder(payload: bytearray) -> Callable[[], object] | None:
    if importlib.util.find_spec("grete.protocol.messages.produce") is None:
        print("grete.protocol.messages.produce not found: skipping the full ProduceRequest frame")
        return None
    from grete.protocol.codec import Reader, Writer
    from grete.protocol.headers import RequestHeader, decode_request_header, encode_request_header
    from grete.protocol.messages.produce import ProduceRequest

    request = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name="bench", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(payload))])])
    w = Writer()
    encode_request_header(w, RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="bench"))
    request.encode(w, 9)
    frame = memoryview(bytearray(w.getvalue()))

    def run() -> object:
        header, body = decode_request_header(frame)
        decoded = ProduceRequest.decode(Reader(frame, body), header.api_version)
        records = decoded.topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview)
        return validator(records, deep=False)()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    payload, count = make_payload()
    view = memoryview(payload)
    print(f"payload: {len(payload)} bytes, {count} records of ~{RECORD_SIZE} B; python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} cpus")
    floor = report("bare crc32c (1 MB)", timeit(lambda: crc32c.crc32c(view), args.repeat, 200),
                   len(payload), count, None)
    report("validate deep=False (header + CRC)", timeit(validator(view, False), args.repeat, 200),
           len(payload), count, floor)
    report("validate deep=True (per record)", timeit(validator(view, True), args.repeat, 5),
           len(payload), count, floor)
    decode = frame_decoder(payload)
    if decode is not None:
        report("ProduceRequest v9 frame + validate", timeit(decode, args.repeat, 200), len(payload), count, floor)


if __name__ == "__main__":
    main()
