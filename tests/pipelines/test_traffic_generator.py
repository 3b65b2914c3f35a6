"""The traffic generator's event times, and its producer and end of input on one grete broker (no Spark)."""

from __future__ import annotations

import json
import time
from collections import Counter

from grete.protocol.records.batch import iter_batches
from grete.testing import broker
from pipelines.traffic import data, generator
from pipelines.traffic.streaming import CLOSE_AFTER_S
from pipelines.traffic.topics import end_offsets, ensure_topics, read_range, run_ranges

LAST_SECOND = 1_790_000_000
PAIRS_PER_SECOND = 200  # the default 400 msg/s


def test_events_are_written_idempotently_and_every_partition_ends_after_the_last_window() -> None:
    with broker() as b:
        bootstrap = b.bootstrap_servers
        ensure_topics(bootstrap, {"flow": {}, "speed": {}}, partitions=3)
        send, flush = generator.kafka_sender(bootstrap)
        lanes, readings = data.sites(), data.Readings()
        for n, lane in enumerate(lanes):
            k, flow, speed = readings.pair(lane, 0, LAST_SECOND, n)
            send("flow", k, flow)
            send("speed", k, speed)
        assert flush() == 0
        assert generator.end_input(bootstrap, generator.Plan(flow_topic="flow", speed_topic="speed"),
                                   LAST_SECOND) == 6
        for topic in ("flow", "speed"):
            records = read_range(bootstrap, topic, run_ranges({}, end_offsets(bootstrap, topic)))
            ends = [r for r in records if r.key.startswith(data.END_KEY_PREFIX)]
            assert len(records) == len(lanes) + 3
            assert sorted(r.partition for r in ends) == [0, 1, 2]
            assert {json.loads(r.value)["timestamp"] for r in ends} == {data.event_time(LAST_SECOND + CLOSE_AFTER_S)}
            # Every partition's end-of-input record comes after its events.
            assert all(r.offset == max(o.offset for o in records if o.partition == r.partition) for r in ends)
        # An idempotent producer's batches carry a producer id and sequence numbers, so a retried
        # batch is recognised and written once.
        segments = sorted(b.data_dir.glob("flow-*/*.log")) + sorted(b.data_dir.glob("speed-*/*.log"))
        batches = [batch for s in segments for batch in iter_batches(s.read_bytes())]
        assert len(segments) == 6 and batches
        assert all(batch.producer_id >= 0 and batch.base_sequence >= 0 for batch in batches)


def test_a_second_that_starts_late_keeps_its_own_event_time() -> None:
    """A publisher held up across the start of a second (a busy machine) sends that second late; its
    events must still carry their own second, or two seconds share every window and one has none."""
    per_second: Counter[str] = Counter()

    def send(topic: str, _key: bytes, value: bytes) -> None:
        if topic == "flow":
            per_second[json.loads(value)["timestamp"]] += 1
            if sum(per_second.values()) == 2 * PAIRS_PER_SECOND:  # second 1's last pair, then held up
                time.sleep(0.7)  # the hold-up itself, not a wait for anything

    generator.run(generator.Plan(duration=4, flow_topic="flow", speed_topic="speed"), send)
    seconds = sorted(data.event_second(ts) for ts in per_second)
    assert seconds == list(range(seconds[0], seconds[0] + 4)), per_second
    assert set(per_second.values()) == {PAIRS_PER_SECOND}, per_second
