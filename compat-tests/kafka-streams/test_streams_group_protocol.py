"""Kafka Streams 4.3 with ``group.protocol=streams`` (KIP-1071): the broker keeps the group, creates the
internal topics from the topology and assigns the tasks. Our word count (tools/java/StreamsWordCount.java,
exactly_once_v2, record cache off) runs as two instances of one application: the second joins late and
later leaves cleanly, with lines produced before, between and after. Every word's committed updates
must be exactly 1..n, and while both run the group must show two members sharing the tasks, each with
the standby copies of the other's counting tasks (``streams.num.standby.replicas=1``, a GROUP config
set before the start; StreamsGroupDescribe).
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

from grete.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
)
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


def call(bootstrap: str, request: Any, response_cls: Any, version: int) -> Any:
    """``request`` to the first address of ``bootstrap`` (a cluster's are comma-separated)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    wire = Wire(host, int(port))
    try:
        return wire.call(request, response_cls, version)
    finally:
        wire.sock.close()


def coordinator(bootstrap: str, group_id: str) -> str:
    """host:port of the group's coordinator (on a cluster, one broker of several)."""
    found = call(bootstrap, FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id]),
                 FindCoordinatorResponse, 4).coordinators[0]
    return f"{found.host}:{found.port}" if found.error_code == 0 else bootstrap


def describe(bootstrap: str, group_id: str) -> Any:
    return call(coordinator(bootstrap, group_id),
                StreamsGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False),
                StreamsGroupDescribeResponse, 0).groups[0]


def set_standby_replicas(bootstrap: str, group_id: str, replicas: int) -> None:
    iac = IncrementalAlterConfigsRequest
    answer = call(bootstrap, iac(resources=[iac.AlterConfigsResource(resource_type=32, resource_name=group_id, configs=[
        iac.AlterableConfig(name="streams.num.standby.replicas", config_operation=0, value=str(replicas))])]),
        IncrementalAlterConfigsResponse, 1)
    assert answer.responses[0].error_code == 0, answer.responses[0].error_message


def tasks_of(assignment: Any) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    return ({(t.subtopology_id, p) for t in assignment.active_tasks for p in t.partitions},
            {(t.subtopology_id, p) for t in assignment.standby_tasks for p in t.partitions})


def both_members_hold_tasks(bootstrap: str, group_id: str) -> bool:
    """Stable, two members running tasks, and each holding the standby copies of the other's tasks
    of the counting subtopology ("1": the only one with state)."""
    group = describe(bootstrap, group_id)
    if group.error_code != 0 or group.group_state != "Stable" or len(group.members) != 2:
        return False
    (active1, standby1), (active2, standby2) = (tasks_of(m.assignment) for m in group.members)
    return bool(active1 and active2) and (standby1, standby2) == ({t for t in active2 if t[0] == "1"},
                                                                   {t for t in active1 if t[0] == "1"})


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
        set_standby_replicas(broker.bootstrap, app_id, 1)
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
        wait_for(lambda: both_members_hold_tasks(broker.bootstrap, app_id), 90, two,
                 "both instances holding tasks and each other's standby copies")
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
        # Alone again: every task active on the first instance, no copies (no other process).
        assert [tasks_of(m.assignment) for m in group.members] == [
            ({(s, p) for s in ("0", "1") for p in range(PARTITIONS)}, set())]
    finally:
        one.kill()
        two.kill()
