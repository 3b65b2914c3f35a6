"""Synthetic road sensors shaped like the NDW loop-detector data OSPBench replays.

Nothing here comes from OSPBench's data files: 12 measurement sites with 6 x 1 lane, 5 x 2 lanes and
1 x 3 lanes (19 lanes), a fixed position per site, and per observation a flow (cars/hour, 300..2400)
and an average speed (km/h, 73..126) drawn from a seeded generator. Events are the JSON OSPBench's
generator publishes (flow ~141 B, speed ~129 B, keys ~60 B) plus ``gen_ns``, the wall-clock time the
event was made, for the generation -> read delay of the KafkaDirect paper (section 5.4).
"""

from __future__ import annotations

import calendar
import json
import random
import time
from dataclasses import dataclass

LANES_PER_SITE: tuple[int, ...] = (1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3)
FLOW_TOPIC = "ndwflow"
SPEED_TOPIC = "ndwspeed"
OUTPUT_TOPIC = "metrics"
# Output records are keyed by window, "<measurementId>@<window start, epoch seconds>", so that a consumer
# keeping the last value per key sees each window once however often the sink rewrote it.
WINDOW_KEY_SEP = "@"
# The generator ends its input with one record per partition of each topic under this key prefix, far
# enough in event time to close the last windows; it joins with nothing and is no observation.
END_KEY_PREFIX = b"~end-of-input:"
# The key starts with a fixed-width prefix (publisher, copy, volume iteration) so that the copies of
# one observation sent in the same second get distinct keys, as in OSPBench; flow and speed of one
# lane and copy share the key, which is what the join pairs on.
KEY_PREFIX_LEN = 5


@dataclass(frozen=True)
class Lane:
    site: str  # the measurement id, ~57 characters like NDW's
    lane: str  # "lane1".."lane3"
    lat: float
    long: float
    num_lanes: int


def sites(seed: int = 7) -> list[Lane]:
    """The 19 lanes over 12 measurement ids, always the same for one seed."""
    rng = random.Random(seed)
    lanes: list[Lane] = []
    for i, n in enumerate(LANES_PER_SITE):
        path = "/".join(rng.choice("abcdefghknuxz0123456789") for _ in range(12))
        site = f"{path}/RWS01_SYNTH_{rng.getrandbits(80):020X}_{i}"
        lat, long = round(rng.uniform(50.8, 53.4), 5), round(rng.uniform(3.4, 7.2), 5)
        lanes += [Lane(site, f"lane{k + 1}", lat, long, n) for k in range(n)]
    return lanes


def key(lane: Lane, copy: int, publisher: int = 0, volume: int = 0) -> bytes:
    return f"{publisher % 10}{copy % 100:02d}{volume % 100:02d}{lane.site}".encode()


def event_time(second: int) -> str:
    """OSPBench's event time format, 'yyyy-MM-dd HH:mm:ss' (UTC here), of a whole wall-clock second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(second))


def event_second(ts: str) -> int:
    """The inverse of ``event_time``."""
    return calendar.timegm(time.strptime(ts, "%Y-%m-%d %H:%M:%S"))


def window_key(measurement_id: str, second: int) -> str:
    return f"{measurement_id}{WINDOW_KEY_SEP}{second}"


def flow_value(lane: Lane, flow: int, ts: str, gen_ns: int) -> bytes:
    body = {"internalId": lane.lane, "lat": lane.lat, "long": lane.long, "flow": flow, "period": 60,
            "accuracy": 100, "timestamp": ts, "num_lanes": lane.num_lanes, "gen_ns": gen_ns}
    return json.dumps(body, separators=(",", ":")).encode()


def speed_value(lane: Lane, speed: float, ts: str, gen_ns: int) -> bytes:
    body = {"internalId": lane.lane, "lat": lane.lat, "long": lane.long, "speed": speed,
            "accuracy": 100, "timestamp": ts, "num_lanes": lane.num_lanes, "gen_ns": gen_ns}
    return json.dumps(body, separators=(",", ":")).encode()


class Readings:
    """Seeded flow/speed readings per lane."""

    def __init__(self, seed: int = 11) -> None:
        self.rng = random.Random(seed)

    def flow(self) -> int:
        return self.rng.randint(300, 2400)

    def speed(self) -> float:
        return round(self.rng.uniform(73.0, 126.0), 1)

    def pair(self, lane: Lane, copy: int, second: int, now_ns: int, publisher: int = 0,
             volume: int = 0) -> tuple[bytes, bytes, bytes]:
        """(key, flow value, speed value) for one lane observed in event second ``second``, made at
        ``now_ns``. One second's events share the event time: rounding each event's own time
        would split a site's lanes (and its copies) over two windows."""
        ts = event_time(second)
        return (key(lane, copy, publisher, volume), flow_value(lane, self.flow(), ts, now_ns),
                speed_value(lane, self.speed(), ts, now_ns))


END_LANE = Lane(site="end-of-input", lane="end", lat=0.0, long=0.0, num_lanes=0)


def end_of_input(topic: str, second: int, speed: bool) -> tuple[bytes, bytes]:
    """(key, value) of an end-of-input record of event second ``second`` for ``topic``. Flow and
    speed get different keys (the topic is part of the key) so that they never join."""
    ts, k = event_time(second), END_KEY_PREFIX + topic.encode()
    return k, (speed_value(END_LANE, 0.0, ts, 0) if speed else flow_value(END_LANE, 0, ts, 0))
