"""The charts' data: a small ring of the broker's cumulative counters, sampled when a console page is
served (at most once per ``MIN_INTERVAL_S``), so that an idle broker nobody watches runs no timer
at all. Rates are differences of neighbouring samples; a gap longer than ``MAX_GAP_S`` (nobody was
looking) breaks the line instead of drawing an average across it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from grete.broker.metrics.broker_metrics import BrokerMetrics

CAPACITY = 600
MIN_INTERVAL_S = 1.0
MAX_GAP_S = 30.0
WINDOW_S = 300.0

# (field, title) of each chart, in page order.
SERIES = (("bytes_in", "Bytes in /s"), ("bytes_out", "Bytes out /s"), ("messages_in", "Messages in /s"),
          ("requests", "Requests /s"))

Point = tuple[float, float]  # (seconds before now, rate)


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # monotonic seconds
    bytes_in: int
    bytes_out: int
    messages_in: int
    requests: int


def read_counters(metrics: BrokerMetrics, at: float) -> Sample:
    totals = metrics.totals
    requests = sum(sum(api.requests.values()) for api in metrics.apis.values())
    return Sample(at, totals.bytes_in, totals.bytes_out, totals.messages_in, requests)


class SampleRing:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.samples: deque[Sample] = deque(maxlen=capacity)

    def take(self, metrics: BrokerMetrics, now: float) -> None:
        if self.samples and now - self.samples[-1].at < MIN_INTERVAL_S:
            return
        self.samples.append(read_counters(metrics, now))

    def lines(self, name: str, now: float, window: float = WINDOW_S) -> list[list[Point]]:
        """The rate of counter ``name`` over the last ``window`` seconds, as runs of points."""
        runs: list[list[Point]] = []
        previous: Sample | None = None
        for sample in self.samples:
            if previous is not None and now - sample.at <= window:
                elapsed = sample.at - previous.at
                if elapsed > MAX_GAP_S:
                    runs.append([])
                elif elapsed > 0:
                    rate = max(getattr(sample, name) - getattr(previous, name), 0) / elapsed
                    if not runs:
                        runs.append([])
                    runs[-1].append((now - sample.at, rate))
            previous = sample
        return [run for run in runs if run]
