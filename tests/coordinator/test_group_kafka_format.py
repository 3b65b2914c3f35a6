"""Apache Kafka's own ``kafka-dump-log --offsets-decoder`` reads the __consumer_offsets records grete
writes: group metadata (with a static member), offsets (v3, and v1 with an explicit expiry) and
tombstones.

Needs Java and Kafka's jars (``python -m tools.kafka_dist fetch``); skipped without them.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from grete.coordinator.groups.group_types import OffsetCommit
from grete.testing import broker
from tests.coordinator._support import join, protos, sync
from tools import kafka_dist

pytestmark = [pytest.mark.slow, pytest.mark.compat]


def _need_kafka(version: str) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    try:
        kafka_dist.fetch(version)
    except Exception as exc:  # no network, no mvn: nothing to compare with
        pytest.skip(f"Kafka {version} jars unavailable: {exc}")


async def _scenario(coord: Any) -> None:
    res = await join(coord, "fmt", instance="inst-1", client_id="cid", protocols=protos("orders"),
                     session_ms=10_000, rebalance_ms=20_000)
    await sync(coord, res, "fmt", instance="inst-1", assignments=[(res.member_id, b"\x00\x01raw")])
    await coord.commit_offsets(group_id="fmt", generation_id=1, member_id=res.member_id,
                               group_instance_id="inst-1", retention_ms=-1,
                               offsets=[OffsetCommit("orders", 3, 1234, 5, "meta")])
    await coord.commit_offsets(group_id="fmt", generation_id=1, member_id=res.member_id,
                               group_instance_id="inst-1", retention_ms=60_000,
                               offsets=[OffsetCommit("orders", 4, 99, 5, "")])
    await coord.delete_offsets("fmt", [("unrelated", 0)])
    # A group in the same partition that is deleted: tombstones for its offsets and itself.
    await coord.commit_offsets(group_id="gone", generation_id=-1, member_id="", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("orders", 0, 1)])
    await coord.delete_groups(["gone"])


@pytest.mark.parametrize("version", ["3.9", "4"])
def test_kafka_decodes_grete_offsets_topic(version: str) -> None:
    _need_kafka(version)
    with tempfile.TemporaryDirectory(prefix="grete-fmt-") as tmp:
        data = Path(tmp)
        with broker(data_dir=data, overrides={"group.min.session.timeout.ms": "10"}) as b:
            coord = b.broker.group_coordinator
            b.call(_scenario, coord)
            partitions = {b.call(coord.partition_for, g) for g in ("fmt", "gone")}
        lines = []
        for p in sorted(partitions):
            for seg in sorted((data / f"__consumer_offsets-{p}").glob("*.log")):
                done = kafka_dist.run_tool(version, "kafka-dump-log", "--offsets-decoder", "--print-data-log",
                                           "--files", str(seg), timeout=180)
                assert done.returncode == 0, done.stderr[-3000:]
                lines += [line for line in done.stdout.splitlines() if line.startswith("| offset:")]
    records = [_parse(line) for line in lines]
    fmt_groups = [v for k, v in records if k["type"] == "2" and k["data"]["group"] == "fmt"]
    assert fmt_groups[-1]["version"] == "3"
    group = fmt_groups[-1]["data"]
    assert (group["protocolType"], group["generation"], group["protocol"]) == ("consumer", 1, "range")
    (member,) = group["members"]
    assert (member["groupInstanceId"], member["clientId"], member["sessionTimeout"],
            member["rebalanceTimeout"]) == ("inst-1", "cid", 10_000, 20_000)
    assert member["memberId"].startswith("inst-1-") and group["leader"] == member["memberId"]
    assert member["subscription"]["topics"] == ["orders"]
    offsets = {(k["data"]["topic"], k["data"]["partition"]): v for k, v in records
               if k["type"] == "1" and k["data"]["group"] == "fmt"}
    assert offsets[("orders", 3)] == {"version": "3", "data": {
        "offset": 1234, "leaderEpoch": 5, "metadata": "meta",
        "commitTimestamp": offsets[("orders", 3)]["data"]["commitTimestamp"]}}
    explicit = offsets[("orders", 4)]
    assert explicit["version"] == "1"
    assert explicit["data"]["expireTimestamp"] - explicit["data"]["commitTimestamp"] == 60_000
    gone = [(k["type"], v) for k, v in records if k["data"]["group"] == "gone"]
    assert gone[-2:] == [("1", None), ("2", None)]  # offset tombstone, then group tombstone


def _parse(line: str) -> tuple[dict[str, Any], Any]:
    found = re.search(r"key: (\{.*\}) payload: (.*)$", line)
    assert found, line
    payload = found.group(2).strip()
    return json.loads(found.group(1)), (None if payload in ("<DELETE>", "null", "") else json.loads(payload))
