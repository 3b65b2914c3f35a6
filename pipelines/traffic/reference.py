"""What the streaming job should have written, computed in plain Python from its input records, and
the window-by-window comparison with what it did write.

The reference follows streaming.py's semantics independently of Spark: an inner join of flow and speed
on (key, lane, event second), then per (key, event second) the sorted set of lanes, the summed flow,
the average speed rounded to 2 decimals and the largest ``num_lanes``. It is computed from the
distinct input records (each event carries its generation time, so two equal records are one event
sent twice); the end-of-input records are not observations. The output is read as a downstream
consumer keeping the last value per window key would read it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipelines.traffic.data import END_KEY_PREFIX, event_second, window_key
from pipelines.traffic.topics import Record

# Spark rounds the average HALF_UP, Python to nearest even: allow the last digit's rounding only.
SPEED_TOLERANCE = 0.0051
EXAMPLES = 3  # window keys shown per kind of mismatch


@dataclass(frozen=True)
class Figures:
    """One window's answer, as the job writes it."""

    measurement_id: str
    window_start: int  # epoch seconds
    lanes: tuple[str, ...]
    num_lanes: int
    accumulated_flow: int
    average_speed: float

    def matches(self, other: Figures) -> bool:
        return (self.measurement_id, self.window_start, self.lanes, self.num_lanes, self.accumulated_flow) == (
            other.measurement_id, other.window_start, other.lanes, other.num_lanes, other.accumulated_flow,
        ) and abs(self.average_speed - other.average_speed) <= SPEED_TOLERANCE


@dataclass(frozen=True)
class Observation:
    key: str
    lane: str
    second: int
    num_lanes: int
    measure: float


def observations(records: Iterable[Record], measure: str) -> tuple[list[Observation], int]:
    """The distinct observations among input records (``measure``: "flow" or "speed") and how many
    records repeated one already seen."""
    counts = Counter((r.key, r.value) for r in records if not r.key.startswith(END_KEY_PREFIX))
    found = []
    for k, v in counts:
        body = json.loads(v)
        found.append(Observation(k.decode(), body["internalId"], event_second(body["timestamp"]),
                                 body["num_lanes"], body[measure]))
    return found, sum(counts.values()) - len(counts)


def expected_windows(flows: list[Observation], speeds: list[Observation]) -> dict[str, Figures]:
    """{window key: figures} for the join and aggregate of streaming.py."""
    speed_of: dict[tuple[str, str, int], list[Observation]] = defaultdict(list)
    for s in speeds:
        speed_of[(s.key, s.lane, s.second)].append(s)
    joined: dict[tuple[str, int], list[tuple[Observation, Observation]]] = defaultdict(list)
    for f in flows:
        joined[(f.key, f.second)] += [(f, s) for s in speed_of.get((f.key, f.lane, f.second), ())]
    return {window_key(k, sec): Figures(
        measurement_id=k, window_start=sec, lanes=tuple(sorted({f.lane for f, _ in pairs})),
        num_lanes=max(f.num_lanes for f, _ in pairs), accumulated_flow=int(sum(f.measure for f, _ in pairs)),
        average_speed=round(sum(s.measure for _, s in pairs) / len(pairs), 2),
    ) for (k, sec), pairs in joined.items() if pairs}


def epoch_second(iso: str) -> int:
    """Spark's JSON timestamp (session time zone UTC) as epoch seconds."""
    at = datetime.fromisoformat(iso)
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp())


def output_figures(value: bytes) -> Figures:
    body = json.loads(value)
    return Figures(measurement_id=body["measurementId"], window_start=epoch_second(body["windowStart"]),
                   lanes=tuple(body["lanes"]), num_lanes=body["numLanes"],
                   accumulated_flow=body["accumulatedFlow"], average_speed=body["averageSpeed"])


@dataclass
class Written:
    """The output as a keyed consumer sees it: the last value per window key, plus the keys written
    more than once with the same figures (replayed) and with different figures (duplicated)."""

    last: dict[str, Figures] = field(default_factory=dict)
    replayed: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)


def written(records: Iterable[Record]) -> Written:
    """``records`` in offset order per partition (a key always lands in one partition)."""
    seen: dict[str, list[Figures]] = defaultdict(list)
    for r in records:
        seen[r.key.decode()].append(output_figures(r.value))
    out = Written(last={k: v[-1] for k, v in seen.items()})
    for k, versions in seen.items():
        if len(versions) > 1:
            same = all(v.matches(versions[0]) for v in versions)
            (out.replayed if same else out.duplicated).append(k)
    return out


@dataclass
class Verdict:
    input_records: int  # distinct observations, both topics
    input_duplicates: int  # input records that repeat one already seen
    input_missing: int  # observations the generator sent and the input topics do not hold
    expected_windows: int
    output_windows: int  # distinct window keys written
    missing: list[str]  # expected, never written
    extra: list[str]  # written, not expected
    wrong: list[str]  # written with other figures than expected (last value per key)
    duplicated: list[str]  # written more than once with different figures
    replayed: list[str]  # written more than once with the same figures: harmless to a keyed reader

    @property
    def ok(self) -> bool:
        return bool(self.expected_windows) and not (
            self.input_duplicates or self.input_missing or self.missing or self.extra or self.wrong
            or self.duplicated)

    def summary(self) -> dict[str, object]:
        counts: dict[str, object] = {k: v for k, v in vars(self).items() if isinstance(v, int)}
        for kind in ("missing", "extra", "wrong", "duplicated", "replayed"):
            keys: list[str] = getattr(self, kind)
            counts[f"{kind}_windows"] = len(keys)
            if keys:
                counts[f"{kind}_examples"] = sorted(keys)[:EXAMPLES]
        return counts


def check(flow: Iterable[Record], speed: Iterable[Record], output: Iterable[Record],
          sent: int | None = None) -> Verdict:
    """Compare the job's ``output`` with the reference computed from its ``flow`` and ``speed`` input;
    ``sent``: the number of events the generator published (both topics), when known."""
    flows, flow_dups = observations(flow, "flow")
    speeds, speed_dups = observations(speed, "speed")
    expected, got = expected_windows(flows, speeds), written(output)
    have = len(flows) + len(speeds)
    common = expected.keys() & got.last.keys()
    return Verdict(
        input_records=have, input_duplicates=flow_dups + speed_dups,
        input_missing=max(0, sent - have) if sent is not None else 0,
        expected_windows=len(expected), output_windows=len(got.last),
        missing=sorted(expected.keys() - got.last.keys()), extra=sorted(got.last.keys() - expected.keys()),
        wrong=sorted(k for k in common if not got.last[k].matches(expected[k])),
        duplicated=got.duplicated, replayed=got.replayed,
    )
