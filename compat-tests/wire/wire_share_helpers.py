"""Share-group calls on the wire shared by the share tests of this folder: retried while the group
coordinator is not ready, and a member that joins until it has its assignment."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from grete.testing._wire import Wire

RETRY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def call(wire: Wire, request: Any, response_cls: Any, version: int, code_of: Callable[[Any], int]) -> Any:
    """Ask again while the group coordinator is not ready (Kafka creates __consumer_offsets first;
    after a restart it loads it)."""
    deadline = time.monotonic() + 60
    while True:
        response = wire.call(request, response_cls, version)
        if code_of(response) not in RETRY or time.monotonic() > deadline:
            return response
        time.sleep(0.5)


def heartbeat(wire: Wire, group: str, member: str, epoch: int, topic: str) -> Any:
    return call(wire, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                 subscribed_topic_names=[topic] if epoch == 0 else None),
                ShareGroupHeartbeatResponse, 1, lambda r: r.error_code)


def join(wire: Wire, group: str, topic: str) -> tuple[str, Any, int]:
    """A member that has its assignment: (member id, topic id, member epoch)."""
    member = uuid.uuid4().hex[:22]
    hb = heartbeat(wire, group, member, 0, topic)
    assert hb.error_code == 0, hb.error_message
    deadline = time.monotonic() + 20
    while not (hb.assignment and hb.assignment.topic_partitions) and time.monotonic() < deadline:
        time.sleep(0.5)  # Kafka may assign on a later heartbeat
        hb = heartbeat(wire, group, member, hb.member_epoch, topic)
    assert hb.assignment and hb.assignment.topic_partitions
    return member, hb.assignment.topic_partitions[0].topic_id, hb.member_epoch


def describe_offsets(wire: Wire, group: str, topic: str) -> tuple[int, int]:
    """DescribeShareGroupOffsets v0 of partition 0: (its error code, its start offset)."""
    D = DescribeShareGroupOffsetsRequest
    r = call(wire, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
        D.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]),
        DescribeShareGroupOffsetsResponse, 0, lambda r: r.groups[0].error_code)
    (g,) = r.groups
    assert g.error_code == 0, g.error_message
    (p,) = g.topics[0].partitions
    return p.error_code, p.start_offset
