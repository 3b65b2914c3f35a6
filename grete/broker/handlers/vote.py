"""Vote (52): v0-2, a voter RPC of the KRaft metadata quorum, served on a controller's listener.

Only a node that is a voter of a quorum of several controllers serves it (its Raft driver answers:
grete/broker/quorum); every other node closes the connection, as a Kafka broker listener does.
"""

from __future__ import annotations

from grete.broker.quorum.rpc import answer
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.codec import Message
from grete.protocol.messages import ApiKey, VoteRequest


@api(ApiKey.VOTE, 0, 2)
async def handle(ctx: RequestContext[ClusterControl], request: VoteRequest) -> Message:
    driver = ctx.broker.quorum
    assert driver is not None  # the connection refuses the API without one
    return await answer(ctx, driver, request)
