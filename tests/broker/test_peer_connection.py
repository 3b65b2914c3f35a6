"""The connection a broker keeps to another (transaction verification and markers, share-state
requests, the quorum's RPCs): one the peer closed while it was unused is replaced before the next
request, not written to and read back empty."""

from __future__ import annotations

import asyncio
import time

import pytest

from grete.broker.cluster.peer import PeerConnection
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse


@pytest.mark.grete_overrides(**{"connections.max.idle.ms": "300"})
def test_a_connection_the_peer_closed_while_idle_is_replaced(grete_broker) -> None:
    async def twice_with_a_pause() -> tuple[int, int]:
        peer = PeerConnection(grete_broker.host, grete_broker.port, "peer-test", timeout_s=10)
        try:
            first = await peer.call(ApiVersionsRequest(), 3)
            await asyncio.sleep(1.0)  # the broker closes the idle connection meanwhile
            second = await peer.call(ApiVersionsRequest(), 3)
        finally:
            peer.close()
        assert isinstance(first, ApiVersionsResponse) and isinstance(second, ApiVersionsResponse)
        return first.error_code, second.error_code

    started = time.monotonic()
    assert asyncio.run(twice_with_a_pause()) == (0, 0)
    assert time.monotonic() - started < 5
