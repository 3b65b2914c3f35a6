"""DescribeGroups and ListGroups views of the groups."""

from __future__ import annotations

from grete.coordinator.groups.group_types import OffsetCommit
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test, join, settle, stable_group, started, task


@async_test
async def test_list_groups_filters_by_state_and_type_case_insensitively() -> None:
    coord = await started()
    await stable_group(coord, 1, group="stable")
    await coord.commit_offsets(group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
                               retention_ms=-1, offsets=[OffsetCommit("t", 0, 1)])
    parked = task(join(coord, "joining"))
    await settle()
    await parked  # delay 0: completes into CompletingRebalance

    def ids(states: set[str] | None = None, types: set[str] | None = None) -> set[str]:
        return {g.group_id for g in coord.list_groups(states, types)}

    assert ids() == {"stable", "simple", "joining"}
    assert ids({"stable"}) == {"stable"}
    assert ids({"Empty", "COMPLETINGREBALANCE"}) == {"simple", "joining"}
    assert ids(types={"Classic"}) == ids()
    assert ids(types={"consumer"}) == set()  # KIP-848 groups: none here
    assert {(g.group_id, g.protocol_type) for g in coord.list_groups(None, None)} == {
        ("stable", "consumer"), ("simple", ""), ("joining", "consumer")}
    await coord.shutdown()


@async_test
async def test_describe_hides_metadata_outside_stable_and_reports_unknown_groups_dead() -> None:
    coord = await started()
    res = await join(coord, client_id="cid")
    desc = coord.describe_group("g")
    assert (desc.state, desc.protocol_type, desc.protocol) == ("CompletingRebalance", "consumer", "")
    assert [(m.member_id, m.client_id, m.client_host, m.metadata, m.assignment) for m in desc.members] == [
        (res.member_id, "cid", "/127.0.0.1", b"", b"")]
    unknown = coord.describe_group("nope")
    assert (unknown.error, unknown.state, unknown.found, unknown.members) == (ErrorCode.NONE, "Dead", False, [])
    assert coord.describe_group("").found is False  # allowed, as in Kafka
    await coord.shutdown()
