"""The channel a KRaft broker sends its metadata writes on, to the active controller of the quorum
(Kafka's NodeToControllerChannelManager).

- Where to send comes from ``active_controller``, which resolves once a quorum leader is known;
  ``QuorumLeader`` gives it from a Raft driver (an observer's), woken by the driver's leader changes.
- One connection, moved when the leader's address changes. A new connection first asks ApiVersions,
  as Kafka's NetworkClient does, so a request whose API or version the controller does not serve is
  UNSUPPORTED_VERSION at once rather than a closed connection retried until the timeout (a grete
  controller serves a few APIs fewer than Kafka's: grete/broker/requests/registry.py CONTROLLER_APIS).
- A lost connection, or an answer of NOT_CONTROLLER (the answer's own error, or every item's), means
  the leadership moved: the leader is asked for again and the request sent again after
  ``controller.quorum.retry.backoff.ms``, until ``timeout_s`` has passed: then REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grete
from grete.broker.cluster.peer import PeerConnection, PeerError
from grete.broker.quorum.driver import RaftDriver
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

log = logging.getLogger(__name__)

Address = tuple[str, int]
API_VERSIONS_VERSION = 3
RETRY_BACKOFF_S = 0.02  # controller.quorum.retry.backoff.ms's default
RETRY_BACKOFF_MAX_S = 1.0  # the backoff doubles per failed attempt up to this (reconnect.backoff.max.ms)


class QuorumLeader:
    """The address of the quorum's leader as a Raft driver knows it (its controller listener in
    ``controller.quorum.voters``); awaiting it resolves once a leader is known. The driver calls its
    leadership listeners on every change of the epoch or of its leader, on voters and observers."""

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver
        self._known: asyncio.Future[None] | None = None
        driver.leadership_listeners.append(self._changed)

    def address(self) -> Address | None:
        leader, _epoch, _high_watermark = self._driver.describe()
        voter = self._driver.address_of(leader) if leader >= 0 else None
        return None if voter is None else (voter.host, voter.port)

    def _changed(self, _leads: bool) -> None:
        if self._known is not None and not self._known.done() and self.address() is not None:
            self._known.set_result(None)

    async def __call__(self) -> Address:
        while (found := self.address()) is None:
            if self._known is None or self._known.done():
                self._known = asyncio.get_running_loop().create_future()
                log.debug("controller channel: no quorum leader known; waiting for one")
            await asyncio.shield(self._known)  # one waiter's timeout must not cancel the others'
        return found


class ControllerChannel:
    def __init__(self, node_id: int, active_controller: Callable[[], Awaitable[Address]], timeout_s: float,
                 retry_backoff_s: float = RETRY_BACKOFF_S) -> None:
        self.node_id = node_id
        self.timeout_s = timeout_s
        self._active_controller = active_controller
        self._retry_backoff_s = retry_backoff_s
        self._peer: PeerConnection | None = None
        self._versions: dict[int, tuple[int, int]] | None = None  # api key -> (min, max) of this connection

    async def call(self, request: Message, version: int) -> Message:
        """``request`` at ``version`` to the active controller; its answer, which is not NOT_CONTROLLER.
        UNSUPPORTED_VERSION when the controller does not serve it; REQUEST_TIMED_OUT after ``timeout_s``."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._call(request, version)
        except TimeoutError:
            if self._peer is not None:  # a request may be in flight on it: its answer is not awaited
                self._peer.abort()
                self._versions = None
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{type(request).__name__} not answered by the active "
                             f"controller within {self.timeout_s} s") from None

    async def _call(self, request: Message, version: int) -> Message:
        backoff = self._retry_backoff_s
        while True:
            peer = self._connection(await self._active_controller())
            try:
                self._check_version(peer, await self._versions_of(peer), type(request).API_KEY, version)
                response: Message = await peer.call(request, version)
            except PeerError as exc:
                log.debug("controller channel: %s", exc)
                self._versions = None
            else:
                if not not_controller(response):
                    return response
                log.debug("controller channel: %s:%d does not lead the quorum", peer.host, peer.port)
            # A pause between attempts, doubling as Kafka's reconnect backoff does, so a leader that is
            # gone is not hammered while the observer learns of the next (active_controller answers it).
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    def _connection(self, address: Address) -> PeerConnection:
        peer = self._peer
        if peer is None or (peer.host, peer.port) != address:
            if peer is not None:
                peer.close()
            peer = self._peer = PeerConnection(address[0], address[1], f"broker-{self.node_id}-to-controller",
                                               timeout_s=self.timeout_s)
            self._versions = None
        return peer

    async def _versions_of(self, peer: PeerConnection) -> dict[int, tuple[int, int]]:
        if self._versions is not None:
            return self._versions
        answer: ApiVersionsResponse = await peer.call(
            ApiVersionsRequest(client_software_name="grete", client_software_version=grete.__version__),
            API_VERSIONS_VERSION)
        versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        if peer is self._peer:  # not moved to another controller meanwhile
            self._versions = versions
        return versions

    @staticmethod
    def _check_version(peer: PeerConnection, versions: dict[int, tuple[int, int]], api_key: int,
                       version: int) -> None:
        low, high = versions.get(api_key, (0, -1))
        if not low <= version <= high:
            served = f"versions {low}-{high}" if high >= 0 else "no version"
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"the active controller at {peer.host}:{peer.port} "
                             f"serves {served} of API {api_key}, not {version}")

    def close(self) -> None:
        if self._peer is not None:
            self._peer.close()
            self._peer = None


def not_controller(response: Message) -> bool:
    """Whether the answer says the node asked does not lead the quorum: its own error code, or that
    of every item (answers per topic, resource or entry carry it there)."""
    own = getattr(response, "error_code", None)
    if isinstance(own, int):
        return own == ErrorCode.NOT_CONTROLLER
    codes = [item.error_code for f in response._FIELDS if f.kind == "struct" and f.array
             for item in getattr(response, f.name) or () if isinstance(getattr(item, "error_code", None), int)]
    return bool(codes) and all(code == ErrorCode.NOT_CONTROLLER for code in codes)
