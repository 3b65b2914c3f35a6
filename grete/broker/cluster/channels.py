"""The controller's channels to the brokers (Kafka's ControllerChannelManager): one FIFO queue and one
sender per live broker, each request retried every 100 ms until it is answered or the broker leaves.

Requests go in the order the controller queued them (UpdateMetadata before the LeaderAndIsr that
makes a broker follow a leader it must know), and a broker that is slow or down holds up only its
own queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.coordinator.zookeeper.zk_layout import BrokerInfo
from grete.protocol.codec import Message

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
ResponseCallback = Callable[[Any], None]


class _BrokerChannel:
    def __init__(self, info: BrokerInfo, listener: str, client_id: str) -> None:
        endpoint = info.endpoint(listener) or (info.endpoints[0] if info.endpoints else None)
        self.info = info
        self.queue: asyncio.Queue[tuple[Message, int, ResponseCallback | None]] = asyncio.Queue()
        self.peer = PeerConnection(endpoint.host if endpoint else "", endpoint.port if endpoint else -1, client_id)
        self.task = asyncio.ensure_future(self._send_loop())

    async def _send_loop(self) -> None:
        while True:
            request, version, callback = await self.queue.get()
            while True:
                try:
                    response = await self.peer.call(request, version)
                    break
                except PeerError as exc:
                    log.debug("controller request to broker %d failed, retrying: %s", self.info.id, exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)
            if callback is not None:
                try:
                    callback(response)
                except Exception:
                    log.exception("handling the answer of broker %d to %s failed", self.info.id,
                                  type(request).__name__)

    def close(self) -> None:
        self.task.cancel()
        self.peer.close()


class ControllerChannels:
    def __init__(self, listener: str, controller_id: int) -> None:
        self.listener = listener
        self.client_id = f"controller-{controller_id}"
        self._channels: dict[int, _BrokerChannel] = {}

    def add_broker(self, info: BrokerInfo) -> None:
        self.remove_broker(info.id)
        self._channels[info.id] = _BrokerChannel(info, self.listener, self.client_id)

    def remove_broker(self, broker_id: int) -> None:
        channel = self._channels.pop(broker_id, None)
        if channel is not None:
            channel.close()

    def send(self, broker_id: int, request: Message, version: int, callback: ResponseCallback | None = None) -> None:
        channel = self._channels.get(broker_id)
        if channel is None:
            log.debug("not sending %s to broker %d: it is not live", type(request).__name__, broker_id)
            return
        channel.queue.put_nowait((request, version, callback))

    def close(self) -> None:
        for broker_id in list(self._channels):
            self.remove_broker(broker_id)
