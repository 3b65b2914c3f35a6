"""Kafka 4.3.1's ``kafka-dump-log --offsets-decoder`` reads the streams-group records (KIP-1071) grete's
coordinator writes to ``__consumer_offsets``: all six types decode, with the values grete holds.

Two members of a word-count group (one mid-revocation) are driven through the coordinator; its records
are appended to a grete partition directory, which Kafka's tool then decodes as JSON.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.coordinator.groups.group import GroupCoordinator  # noqa: E402
from grete.coordinator.groups.group_store import InMemoryOffsetsStore  # noqa: E402
from grete.coordinator.groups.streams_requests import StreamsHeartbeat  # noqa: E402
from grete.storage import Log, LogConfig  # noqa: E402
from tests.coordinator._support import config  # noqa: E402
from tests.coordinator.test_streams_groups import ALL_TOPICS, WORD_COUNT  # noqa: E402
from tests.storage._batches import append  # noqa: E402
from tools import kafka_dist  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.compat]


async def drive(store: InMemoryOffsetsStore) -> GroupCoordinator:
    coord = GroupCoordinator(config(streams_initial_rebalance_delay_ms=0), store, topic_view=lambda: ALL_TOPICS)
    await coord.start()

    def beat(member: str, epoch: int, owned: Any = None, endpoint: Any = None) -> Any:
        joining = epoch == 0
        return coord.streams_group_heartbeat(StreamsHeartbeat(
            group_id="app", member_id=member, member_epoch=epoch, instance_id=f"inst-{member}" if joining else None,
            rack_id="r1" if joining else None, rebalance_timeout_ms=30000 if joining else -1,
            topology=WORD_COUNT if joining else None, active_tasks=frozenset() if joining else owned,
            standby_tasks=frozenset() if joining else None, warmup_tasks=frozenset() if joining else None,
            process_id=f"p-{member}" if joining else None, user_endpoint=endpoint,
            client_tags=(("zone", "a"),) if joining else None, client_id="c", client_host="/h"))

    a = await beat("A", 0, endpoint=("hostA", 7001))
    await beat("B", 0)
    await beat("A", a.member_epoch, owned=a.active_tasks)  # A is told to revoke half its tasks
    await coord.shutdown()
    return coord


def test_kafka_decodes_grete_streams_group_records(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.fetch("4")
    except Exception as exc:
        pytest.skip(f"Kafka 4 jars unavailable: {exc}")
    store = InMemoryOffsetsStore()
    coord = asyncio.run(drive(store))
    records = [r for p in store.partitions.values() for r in p]
    directory = tmp_path / "__consumer_offsets-0"
    log = Log.open(directory, LogConfig(), topic_id=uuid.uuid4(), clean_shutdown=True)
    append(log, [v for _, v in records], [k for k, _ in records])
    log.close()
    [segment] = directory.glob("*.log")
    done = kafka_dist.run_tool("4", "kafka-dump-log", "--offsets-decoder", "--print-data-log", "--files",
                               str(segment), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    decoded: dict[tuple[int, str | None], Any] = {}  # last value per key, as a load would see it
    for line in done.stdout.splitlines():
        if " key: " not in line:
            continue
        key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
        payload = json.loads(line.split(" payload: ", 1)[1])
        assert payload["version"] == "0"
        decoded[(int(key["type"]), key["data"].get("memberId"))] = payload["data"]
    assert {t for t, _ in decoded} == {17, 19, 20, 21, 22, 23}
    group = coord.groups["app"].streams
    assert group is not None
    assert decoded[(17, None)]["epoch"] == group.group_epoch
    assert decoded[(17, None)]["lastAssignmentConfigs"] == [{"key": "num.standby.replicas", "value": "0"}]
    assert decoded[(20, None)]["assignmentEpoch"] == group.assignment_epoch
    topology = decoded[(23, None)]
    assert [(s["subtopologyId"], s["sourceTopics"], [t["name"] for t in s["repartitionSourceTopics"]])
            for s in topology["subtopologies"]] == [("0", ["lines"], []), ("1", [], ["app-counts-repartition"])]

    def tasks(entries: list[dict[str, Any]]) -> set[tuple[str, int]]:
        return {(e["subtopologyId"], p) for e in entries for p in e["partitions"]}

    for member_id, member in group.members.items():
        meta = decoded[(19, member_id)]
        assert (meta["processId"], meta["instanceId"], meta["clientTags"]) == (
            f"p-{member_id}", f"inst-{member_id}", [{"key": "zone", "value": "a"}])
        current = decoded[(22, member_id)]
        assert (current["memberEpoch"], current["state"]) == (member.member_epoch, int(member.state))
        assert tasks(current["activeTasks"]) == member.assigned
        assert tasks(current["activeTasksPendingRevocation"]) == member.pending_revocation
        assert tasks(decoded[(21, member_id)]["activeTasks"]) == group.target[member_id]
    assert decoded[(19, "A")]["userEndpoint"] == {"host": "hostA", "port": 7001}
    assert decoded[(22, "A")]["state"] == 1 and decoded[(22, "A")]["activeTasksPendingRevocation"]
