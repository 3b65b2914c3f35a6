"""Publishes flow and speed events paced like OSPBench's data-stream generator.

constant-rate: one (flow, speed) pair per slot on an absolute 5 ms grid (400 msg/s by default;
the rate is a parameter), cycling over the 19 lanes; a lane's n-th pair within one second is copy n
(distinct key prefix), so flow and speed pair 1:1 in the join.

periodic-burst: the same paced baseline, but every ``burst_every`` seconds (first one 9 s after the
start, as in OSPBench) that second's traffic is replaced by a burst of 10 copies x ``burst_volume``
volume iterations x 19 lanes x 2 messages, sent back to back with no pacing (OSPBench's DATA_VOLUME
100 means a volume of 34, 12,920 messages per burst).

Deadlines are absolute (perf_counter), so a late slot does not push every later slot back, and
the n-th second of a run is event second start + n however late it is sent.

The producer is idempotent with acks=all: a batch retried after a leader change is written once, so
a broker's loss neither loses nor duplicates events. ``end_input`` ends a bounded run with one
end-of-input record per partition of each topic, ``CLOSE_AFTER_S`` event seconds after the last
event, so the job's watermark passes the last windows and closes them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipelines.traffic.data import FLOW_TOPIC, SPEED_TOPIC, Lane, Readings, end_of_input, sites
from pipelines.traffic.streaming import CLOSE_AFTER_S

Send = Callable[[str, bytes, bytes], None]


@dataclass
class Plan:
    mode: str = "constant-rate"  # or "periodic-burst"
    duration: float = 30.0  # seconds of publishing
    rate: float = 400.0  # messages/s of the paced baseline (2 messages per slot)
    burst_every: int = 10  # seconds, periodic-burst only
    burst_volume: int = 34  # volume iterations per burst (OSPBench DATA_VOLUME=100 -> 34)
    flow_topic: str = FLOW_TOPIC
    speed_topic: str = SPEED_TOPIC
    publisher: int = 0


@dataclass
class Stats:
    sent: int = 0
    bursts: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, messages), time.time()
    last_second: int | None = None  # the newest event second published


def is_burst_second(plan: Plan, second: int) -> bool:
    return plan.mode == "periodic-burst" and second % plan.burst_every == plan.burst_every - 1


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _burst(plan: Plan, lanes: list[Lane], readings: Readings, send: Send, stats: Stats, event_s: int) -> None:
    start, before = time.time(), stats.sent
    for volume in range(plan.burst_volume):
        for copy in range(10):
            for lane in lanes:
                k, flow, speed = readings.pair(lane, copy, event_s, time.time_ns(), plan.publisher, volume)
                send(plan.flow_topic, k, flow)
                send(plan.speed_topic, k, speed)
                stats.sent += 2
    stats.bursts.append((start, time.time(), stats.sent - before))


def run(plan: Plan, send: Send, stop: Callable[[], bool] = lambda: False) -> Stats:
    """Publish for ``plan.duration`` seconds (or until ``stop()``) through ``send(topic, key, value)``."""
    lanes, readings, stats = sites(), Readings(), Stats()
    slot = 2.0 / plan.rate
    slots_per_second = max(1, math.floor(1.0 / slot))
    _sleep_until(time.perf_counter() + (1.0 - time.time() % 1.0))  # start on a whole second
    t0, first_s = time.perf_counter(), round(time.time())
    for second in range(math.ceil(plan.duration)):
        if stop():
            break
        begin = t0 + second
        _sleep_until(begin)
        # By the schedule, not the clock: a second begun 0.5 s late would otherwise take the next
        # one's event time, and the two would share every window key.
        event_s = first_s + second
        stats.last_second = event_s
        if is_burst_second(plan, second):
            _burst(plan, lanes, readings, send, stats, event_s)
            continue
        for n in range(slots_per_second):
            _sleep_until(begin + n * slot)
            lane = lanes[n % len(lanes)]
            k, flow, speed = readings.pair(lane, n // len(lanes), event_s, time.time_ns(), plan.publisher)
            send(plan.flow_topic, k, flow)
            send(plan.speed_topic, k, speed)
            stats.sent += 2
    return stats


# Retries after a leader change must not write a batch twice, and an acknowledged batch must be on
# every in-sync replica.
PRODUCER_CONFIG: dict[str, object] = {"linger.ms": 20, "enable.idempotence": True, "acks": "all"}


def kafka_sender(bootstrap: str, **config: object) -> tuple[Send, Callable[[], int]]:
    """A confluent-kafka producer configured like OSPBench's (linger.ms=20, no compression), but
    idempotent with acks=all: returns (send, flush); flush returns the number of messages still
    undelivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **config})
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    def send(topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=report)
                break
            except BufferError:  # local queue full during a burst: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)

    def flush() -> int:
        left = int(producer.flush(60))
        if failures:
            raise RuntimeError(f"{len(failures)} deliveries failed, first: {failures[0]}")
        return left

    return send, flush


def end_input(bootstrap: str, plan: Plan, last_second: int) -> int:
    """Publish the end-of-input records, event second ``last_second + CLOSE_AFTER_S``, to every
    partition of both topics (an engine may track event time per partition); returns how many.
    Call it after the events are flushed, so that no event lands behind it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    failures: list[object] = []
    second, sent = last_second + CLOSE_AFTER_S, 0
    for topic, speed in ((plan.flow_topic, False), (plan.speed_topic, True)):
        k, v = end_of_input(topic, second, speed)
        for p in producer.list_topics(topic, timeout=10).topics[topic].partitions:
            producer.produce(topic, value=v, key=k, partition=p,
                             on_delivery=lambda err, _m: failures.append(err) if err is not None else None)
            sent += 1
    if producer.flush(60) or failures:
        raise RuntimeError(f"end-of-input records not delivered: {failures or 'flush timed out'}")
    return sent
