"""FetchSnapshot (59): v0-1, a voter RPC of the KRaft metadata quorum, served on a controller's listener.

A replica that the leader's Fetch answer sent to a snapshot (it has no log yet, or asks for records
before the leader's log start) reads that snapshot here, chunk after chunk, from the leader (Kafka's
handleFetchSnapshotRequest: SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE, the leader-epoch checks). Only
a voter of a quorum of several controllers serves it; every other node closes the connection.
"""

from __future__ import annotations

from grete.broker.quorum.rpc import answer
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.codec import Message
from grete.protocol.messages import ApiKey, FetchSnapshotRequest


@api(ApiKey.FETCH_SNAPSHOT, 0, 1)
async def handle(ctx: RequestContext[ClusterControl], request: FetchSnapshotRequest) -> Message:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    return await answer(ctx, driver, request)
