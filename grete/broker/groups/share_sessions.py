"""KIP-932 share sessions: the partitions a member fetches, the epoch its next request carries, and
the connection that opened it (when that connection closes, the session ends, as in Kafka)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from grete.protocol.errors import ErrorCode, KafkaError

FINAL_EPOCH = -1
INITIAL_EPOCH = 0

PartitionKey = tuple[uuid.UUID, int]  # (topic id, partition index)


@dataclass(slots=True)
class ShareSession:
    """KIP-932 share session: the partitions a member fetches, and the epoch its next request carries."""
    group_id: str
    member_id: str
    next_epoch: int = 0  # the opening request (epoch 0) bumps it to 1
    connection: int = 0  # the connection that opened it
    partitions: set[PartitionKey] = field(default_factory=set)

    def bump(self) -> None:
        self.next_epoch = 1 if self.next_epoch == 0x7FFFFFFF else self.next_epoch + 1


class ShareSessions:
    def __init__(self, release_member: Callable[[str, str], None]) -> None:
        self._release_member = release_member  # what a member holds goes back when its session is replaced
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        # share sessions by the connection that opened them (``id`` of its context.Session)
        self.by_connection: dict[int, set[tuple[str, str]]] = {}

    def session_for(self, group_id: str, member_id: str, epoch: int, *, fetch: bool,
                    connection: int = 0) -> ShareSession:
        """The session a request with ``epoch`` names; epoch 0 (ShareFetch only) opens a new one,
        owned by ``connection``: when that connection closes, the session ends (as in Kafka)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if not fetch:
                raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "Invalid share session epoch")
            if key in self.sessions:  # a new session replaces the old one; its records go back
                self._release_member(group_id, member_id)
                self.unbind(key)
            session = self.sessions[key] = ShareSession(group_id, member_id, connection=connection)
            self.by_connection.setdefault(connection, set()).add(key)
            return session
        session_found = self.sessions.get(key)
        if session_found is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, "Share session not found")
        if epoch != FINAL_EPOCH and epoch != session_found.next_epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "Invalid share session epoch")
        return session_found

    def unbind(self, key: tuple[str, str]) -> None:
        session = self.sessions.get(key)
        owner = session.connection if session is not None else None
        for conn, keys in list(self.by_connection.items()):
            if owner is None or conn == owner:
                keys.discard(key)
                if not keys:
                    del self.by_connection[conn]
