"""What the rest of the broker sees of the direct path (``Broker.direct``), without importing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from grete.broker.cluster.peer import PeerConnection
    from grete.broker.replica.partition import Partition


class PushReceiver(Protocol):
    """The follower's side of replication push (grete/broker/direct/receive.py), as the replica
    fetcher uses it: which partitions take pushes (and are not fetched), registering cleanly fetched ones
    with their leader, and dropping one (unfollowed, or followed anew)."""

    def pushed(self, key: tuple[str, int]) -> bool: ...

    def eligible(self, partition: Partition) -> bool: ...

    def drop(self, key: tuple[str, int]) -> None: ...

    async def register(self, leader_id: int, peer: PeerConnection, broker_id: int,
                       partitions: list[Partition], wake_fetcher: Callable[[], None]) -> None: ...


class DirectPath(Protocol):
    def refresh(self) -> None:
        """Re-derive every consumer slot (after log maintenance: rolls, retention, deletions)."""

    def push_receiver(self) -> PushReceiver | None:
        """The follower's replication push receiver, when ``direct.replication.enable`` is set."""

    async def stop(self) -> None: ...
