"""The follower's half of a fetch session (KIP-227; Kafka's FetchSessionHandler, which Kafka's replica
fetchers use too).

The first fetch to a leader is full and asks for a session. After that each fetch names only the
partitions whose fetch parameters changed since the last one (fetch offset, leader epoch, last
fetched epoch, log start, max bytes) plus the ones to forget, and the leader answers only the
partitions with news (records, a moved high watermark or log start, an error, a diverging epoch).
The leader still reads every partition of the session and records each follower's fetch state, so
the ISR and the high watermark move as before; what goes away is encoding, sending and decoding
every followed partition twice a second while nothing happens.

Anything unexpected (an error answer, a lost connection, an answer without a session) drops the
session: the next fetch is full again and asks for a new one, closing the old one on the leader.
"""

from __future__ import annotations

from grete.broker.replica.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from grete.protocol.errors import ErrorCode

PartitionKey = tuple[str, int]
# What the leader's session holds for a partition: current leader epoch, fetch offset, last fetched
# epoch, log start offset (and the partition max bytes, the same for all: held once).
Position = tuple[int, int, int, int]
Held = tuple[dict[PartitionKey, Position], int]


class FollowerSession:
    """One follower's session with one leader: the id and epoch to send next and what the leader's
    session holds for each partition."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held: Held = ({}, -1)  # the leader's view, as of the last answered fetch
        self._asked: Held = ({}, -1)  # the view once the fetch in flight is answered

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def select(self, wanted: dict[PartitionKey, Position],
               max_bytes: int) -> tuple[list[PartitionKey], list[PartitionKey]]:
        """For the next fetch of ``wanted`` (each partition's fetch position), each with
        ``max_bytes``: (the partitions to name, the ones to forget). Only those are built into the
        request."""
        self._asked = (wanted, max_bytes)
        if self.full:
            return list(wanted), []
        held, held_max_bytes = self._held
        if held_max_bytes != max_bytes:
            send = list(wanted)  # every partition's parameters changed
        elif held == wanted:  # an idle follower: nothing moved since the last answered fetch
            return [], []
        else:
            send = [key for key, p in wanted.items() if held.get(key) != p]
        return send, [key for key in held if key not in wanted]

    def answered(self, session_id: int) -> None:
        """The fetch came back without a top-level error, carrying ``session_id``."""
        if session_id == INVALID_SESSION_ID or (not self.full and session_id != self.session_id):
            self._drop(close=False)  # the leader keeps no session for us: full fetches it is
            return
        self.session_id = session_id
        self._held = self._asked
        self.epoch = next_epoch(self.epoch)

    def failed(self, error: ErrorCode | None) -> None:
        """The fetch failed (``error``, or None: no answer). Whether the leader applied it is unknown:
        start over with a full fetch, which closes the session it names (Kafka: a session the leader
        does not know is not named)."""
        self._drop(close=error != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)

    def _drop(self, *, close: bool) -> None:
        if not close:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held = ({}, -1)
