"""Creating a large topic opens its partitions a chunk per loop step (broker.py ``open_partitions``):
other connections are served meanwhile, and the answer still comes only once every partition
accepts writes."""

from __future__ import annotations

import select
import time
from typing import Any

from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from grete.testing._wire import Wire

PARTITIONS = 400  # several chunks of broker.OPEN_CHUNK


def _create_request(name: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(timeout_ms=30_000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=PARTITIONS, replication_factor=1)])


def _first_readable(creator: Wire, other: Wire) -> set[str]:
    """Which connections have an answer waiting the moment the first one arrives."""
    readable, _, _ = select.select([creator.sock, other.sock], [], [], 30)
    assert readable, "no answer within 30 s"
    return {name for name, wire in (("create", creator), ("other", other)) if wire.sock in readable}


def test_other_connections_are_answered_while_partitions_open(grete_broker: Any, topic_name: str) -> None:
    creator, other = Wire(grete_broker.host, grete_broker.port), Wire(grete_broker.host, grete_broker.port)
    try:
        other.call(ApiVersionsRequest(), ApiVersionsResponse, 0)  # both connections fully set up
        creator.send(_create_request(topic_name), 5)
        other.send(ApiVersionsRequest(), 0)
        # Answered while the creation is still under way, not after it (then both would be waiting).
        assert _first_readable(creator, other) == {"other"}
        assert other.receive(ApiVersionsResponse, 0).error_code == 0
        (result,) = creator.receive(CreateTopicsResponse, 5).topics
        assert result.error_code == 0 and result.num_partitions == PARTITIONS
        opened = grete_broker.call(lambda: sum(1 for t, _ in grete_broker.broker.partitions if t == topic_name))
        assert opened == PARTITIONS
    finally:
        creator.close()
        other.close()


def test_deleting_the_topic_midway_stops_the_opening(grete_broker: Any, topic_name: str) -> None:
    broker = grete_broker.broker

    def opened() -> int:
        return sum(1 for t, _ in broker.partitions if t == topic_name)

    async def delete_if_midway() -> int | None:
        # On the broker's loop, between two chunks: nothing can open or delete in between.
        n = opened()
        if 0 < n < PARTITIONS:
            await broker.delete_topic(topic_name)
            return n
        return None

    creator = Wire(grete_broker.host, grete_broker.port)
    try:
        creator.send(_create_request(topic_name), 5)
        deadline = time.monotonic() + 30
        midway = None
        while midway is None and time.monotonic() < deadline and grete_broker.call(opened) < PARTITIONS:
            midway = grete_broker.call(delete_if_midway)
        assert midway is not None, "never saw the topic half opened"
        (created,) = creator.receive(CreateTopicsResponse, 5).topics
        assert created.error_code == 0
        logs = grete_broker.call(lambda: [k for k in broker.log_manager.logs if k[0] == topic_name])
        assert grete_broker.call(opened) == 0 and logs == []
    finally:
        creator.close()
