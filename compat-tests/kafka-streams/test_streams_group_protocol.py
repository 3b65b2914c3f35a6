"""Kafka Streams 4.3 with ``group.protocol=streams`` (KIP-1071): the broker keeps the group, creates the
internal topics from the topology and assigns the tasks. Our word count (tools/java/StreamsWordCount.java,
exactly_once_v2, record cache off) runs as two instances of one application: the second joins late and
later leaves cleanly, with lines produced before, between and after. Every word's committed updates
must be exactly 1..n, and while both run the group must show two members sharing the tasks
(StreamsGroupDescribe).
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_streams_wordcount import (  # the sibling test module
    PARTITIONS,
    WordCountApp,
    check_exact,
    committed_updates,
    expected_counts,
    lines_for,
    produce_lines,
    wait_for,
)

from grete.protocol.messages import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse
from grete.testing._wire import Wire

pytestmark = [pytest.mark.compat, pytest.mark.slow]

STREAMS_CONFIGS = ("group.protocol=streams", "num.stream.threads=1")


class StreamsApp(WordCountApp):
    def __init__(self, version: str, bootstrap: str, src: str, dst: str, app_id: str, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(version, bootstrap, src, dst, app_id, workdir)
        self.args = [bootstrap, src, dst, app_id, str(workdir / "state"), *STREAMS_CONFIGS]

    def stop(self) -> None:
        """SIGTERM: the shutdown hook closes KafkaStreams, which leaves the group (epoch -1)."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


def describe(bootstrap: str, group_id: str) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    wire = Wire(host, int(port))
    try:
        response = wire.call(StreamsGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False),
                             StreamsGroupDescribeResponse, 0)
    finally:
        wire.sock.close()
    return response.groups[0]


def both_members_hold_tasks(bootstrap: str, group_id: str) -> bool:
    group = describe(bootstrap, group_id)
    held = [sum(len(t.partitions) for t in m.assignment.active_tasks) for m in group.members]
    return group.error_code == 0 and group.group_state == "Stable" and len(held) == 2 and all(held)


def total(updates: dict[str, list[int]]) -> int:
    return sum(map(len, updates.values()))


@pytest.mark.timeout(300)
def test_two_instances_join_late_and_leave_with_exact_counts(java_client, broker, target, make_topic,
                                                             tmp_path) -> None:
    if not java_client.version.startswith("4") or target == "kafka-3.9":
        pytest.skip("the streams group protocol needs Kafka Streams and a broker of 4.2 or later")
    src, dst = make_topic(partitions=PARTITIONS), make_topic(partitions=PARTITIONS)
    app_id = f"wcs-{uuid.uuid4().hex[:8]}"
    rng = random.Random(18)
    first, second, third = lines_for(rng, 100), lines_for(rng, 100), lines_for(rng, 100)
    one = StreamsApp(java_client.version, broker.bootstrap, src, dst, app_id, tmp_path / "one")
    two = StreamsApp(java_client.version, broker.bootstrap, src, dst, app_id, tmp_path / "two")
    try:
        produce_lines(broker.bootstrap, src, first)
        one.start()
        wait_for(lambda: total(committed_updates(broker.bootstrap, dst)) == sum(expected_counts(first).values()),
                 120, one, "counts of the first lines")
        group = describe(broker.bootstrap, app_id)
        assert (group.error_code, len(group.members)) == (0, 1)
        # The broker created the internal topics from the topology, sized from the input topic.
        internal = {t.name: t.partitions for s in group.topology.subtopologies
                    for t in s.repartition_source_topics + s.state_changelog_topics}
        assert internal == {f"{app_id}-word-counts-repartition": PARTITIONS,
                            f"{app_id}-word-counts-changelog": PARTITIONS}

        two.start()  # joins late: tasks move to it only after the first instance revoked them
        wait_for(lambda: both_members_hold_tasks(broker.bootstrap, app_id), 90, two, "both instances holding tasks")
        produce_lines(broker.bootstrap, src, second)
        wait_for(lambda: total(committed_updates(broker.bootstrap, dst))
                 == sum(expected_counts(first + second).values()), 120, two, "counts with two instances")

        two.stop()  # leaves: its tasks go back to the first instance
        produce_lines(broker.bootstrap, src, third)
        everything = expected_counts(first + second + third)
        wait_for(lambda: total(committed_updates(broker.bootstrap, dst)) >= sum(everything.values()), 120, one,
                 "counts after the second instance left")
        time.sleep(1.0)  # anything beyond the exact total would show up now
        check_exact(committed_updates(broker.bootstrap, dst), everything)
        group = describe(broker.bootstrap, app_id)
        assert [sorted((t.subtopology_id, p) for t in m.assignment.active_tasks for p in t.partitions)
                for m in group.members] == [[(s, p) for s in ("0", "1") for p in range(PARTITIONS)]]
    finally:
        one.kill()
        two.kill()
