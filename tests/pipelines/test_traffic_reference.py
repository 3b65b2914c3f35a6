"""The traffic pipeline's reference check (pipelines/traffic/reference.py) in plain Python, no Spark:
input records as the generator publishes them, output records written by hand as the job would."""

from __future__ import annotations

import json

from pipelines.traffic import data, reference
from pipelines.traffic.topics import Record

SECOND = 1_790_000_000  # an event second
ISO = "2026-09-21T14:13:20.000Z"  # Spark's JSON form of SECOND as a window start
TWO_LANES = next(lane for lane in data.sites() if lane.num_lanes == 2)
ONE_LANE = next(lane for lane in data.sites() if lane.num_lanes == 1)
SITE2 = data.key(TWO_LANES, 0).decode()
SITE1 = data.key(ONE_LANE, 0).decode()


def record(key: bytes, value: bytes, offset: int = 0, partition: int = 0) -> Record:
    return Record(partition, offset, key, value, 0)


def observed(lane: data.Lane, lane_id: str, flow: int, speed: float) -> tuple[Record, Record]:
    """(flow record, speed record) of copy 0 of ``lane``'s site, lane ``lane_id``, at SECOND."""
    one = data.Lane(lane.site, lane_id, lane.lat, lane.long, lane.num_lanes)
    ts, k = data.event_time(SECOND), data.key(one, 0)
    return record(k, data.flow_value(one, flow, ts, 1)), record(k, data.speed_value(one, speed, ts, 1))


def inputs() -> tuple[list[Record], list[Record]]:
    """Two windows: SITE2 (1000 + 500 cars/h, 100.0 and 90.5 km/h) and SITE1 (700, 80.1)."""
    pairs = [observed(TWO_LANES, "lane1", 1000, 100.0), observed(TWO_LANES, "lane2", 500, 90.5),
             observed(ONE_LANE, "lane1", 700, 80.1)]
    return [f for f, _ in pairs], [s for _, s in pairs]


def out(site: str, lanes: list[str], num_lanes: int, flow: int, speed: float, offset: int = 0) -> Record:
    value = {"measurementId": site, "windowStart": ISO, "lanes": lanes, "numLanes": num_lanes,
             "accumulatedFlow": flow, "averageSpeed": speed, "publishTimestamp": 1}
    return record(data.window_key(site, SECOND).encode(), json.dumps(value).encode(), offset)


def right_output() -> list[Record]:
    return [out(SITE2, ["lane1", "lane2"], 2, 1500, 95.25), out(SITE1, ["lane1"], 1, 700, 80.1, offset=1)]


def test_output_equal_to_the_reference_passes() -> None:
    flow, speed = inputs()
    verdict = reference.check(flow, speed, right_output(), sent=6)
    assert verdict.ok, verdict.summary()
    assert (verdict.expected_windows, verdict.output_windows, verdict.input_records) == (2, 2, 6)


def test_a_missing_window_fails() -> None:
    flow, speed = inputs()
    verdict = reference.check(flow, speed, right_output()[:1])
    assert not verdict.ok
    assert verdict.missing == [data.window_key(SITE1, SECOND)]
    assert verdict.summary()["missing_windows"] == 1


def test_a_duplicated_input_record_is_reported_and_its_window_is_wrong() -> None:
    flow, speed = inputs()
    flow.append(flow[0])  # a retried batch written twice: the join pairs lane1 twice, its flow counts twice
    written = [out(SITE2, ["lane1", "lane2"], 2, 2500, 98.17), right_output()[1]]
    verdict = reference.check(flow, speed, written, sent=6)
    assert not verdict.ok
    assert verdict.input_duplicates == 1 and verdict.input_missing == 0
    assert verdict.wrong == [data.window_key(SITE2, SECOND)]


def test_a_window_written_twice_with_other_figures_fails() -> None:
    flow, speed = inputs()
    written = [*right_output(), out(SITE1, ["lane1"], 1, 1400, 80.1, offset=2)]
    verdict = reference.check(flow, speed, written)
    assert not verdict.ok
    assert verdict.duplicated == [data.window_key(SITE1, SECOND)]


def test_a_window_written_twice_with_the_same_figures_is_a_replay() -> None:
    """Spark's sink is at-least-once: a keyed consumer keeps the last value, which is right."""
    flow, speed = inputs()
    verdict = reference.check(flow, speed, [*right_output(), out(SITE1, ["lane1"], 1, 700, 80.1, offset=2)])
    assert verdict.ok, verdict.summary()
    assert verdict.replayed == [data.window_key(SITE1, SECOND)] and verdict.output_windows == 2


def test_an_extra_or_wrong_window_fails() -> None:
    flow, speed = inputs()
    extra = out("0990" + ONE_LANE.site, ["lane1"], 1, 700, 80.1, offset=2)
    verdict = reference.check(flow, speed, [*right_output(), extra])
    assert not verdict.ok and verdict.extra == [extra.key.decode()]
    verdict = reference.check(flow, speed, [out(SITE2, ["lane1", "lane2"], 2, 1500, 95.3), right_output()[1]])
    assert not verdict.ok and verdict.wrong == [data.window_key(SITE2, SECOND)]


def test_input_the_generator_sent_but_the_topics_lack_fails() -> None:
    flow, speed = inputs()
    verdict = reference.check(flow[1:], speed, right_output(), sent=6)
    assert not verdict.ok and verdict.input_missing == 1


def test_end_of_input_records_are_no_observation() -> None:
    flow, speed = inputs()
    for p in (0, 1):  # the same record on every partition: not a duplicate either
        flow.append(record(*data.end_of_input("ndwflow", SECOND + 4, speed=False), partition=p))
        speed.append(record(*data.end_of_input("ndwspeed", SECOND + 4, speed=True), partition=p))
    verdict = reference.check(flow, speed, right_output(), sent=6)
    assert verdict.ok, verdict.summary()
    assert verdict.input_records == 6 and verdict.expected_windows == 2
