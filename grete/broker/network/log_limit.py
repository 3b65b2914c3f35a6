"""Warnings about repeated bad input, rate limited: clients sending thousands of malformed frames must
not write thousands of log lines.

Per kind of warning, the first ``first`` in a window of ``window_s`` seconds are logged; the rest are
counted and summarised in one line when the window ends ("... and 1,995 more malformed requests from
10.0.0.7 in the last 10 s"). While they keep coming, that summary is the only line per window; after
a whole window with none, the next ones are logged again. The summary's timer is armed only when
something was suppressed: an idle broker runs none.
"""

from __future__ import annotations

import asyncio
import logging

FIRST = 5
WINDOW_S = 10.0
PEERS_NAMED = 3  # addresses named in a summary; the rest are counted
PEERS_KEPT = 1000  # distinct addresses counted per window (a flood from everywhere stays bounded)


class _Kind:
    __slots__ = ("log", "since", "logged", "suppressed", "peers", "timer")

    def __init__(self, log: logging.Logger, since: float) -> None:
        self.log = log  # the summary goes where the first lines went
        self.since = since
        self.logged = 0
        self.suppressed = 0
        self.peers: dict[str, None] = {}  # insertion-ordered set: the first offenders are named
        self.timer: asyncio.TimerHandle | None = None


class LimitedWarnings:
    def __init__(self, first: int = FIRST, window_s: float = WINDOW_S) -> None:
        self.first = first
        self.window_s = window_s
        self._kinds: dict[str, _Kind] = {}

    def warning(self, log: logging.Logger, kind: str, peer: str, msg: str, *args: object) -> None:
        """Log ``msg % args`` to ``log`` unless too many of ``kind`` came lately; ``kind`` is plural prose
        ("malformed requests"), ``peer`` the client's address."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        state = self._kinds.get(kind)
        if state is None or (state.timer is None and now - state.since >= self.window_s):
            state = self._kinds[kind] = _Kind(log, now)
        if state.logged < self.first:
            state.logged += 1
            log.warning(msg, *args)
            return
        state.suppressed += 1
        if len(state.peers) < PEERS_KEPT:
            state.peers[peer] = None
        if state.timer is None:
            state.timer = loop.call_at(state.since + self.window_s, self._summarise, kind)

    def _summarise(self, kind: str) -> None:
        state = self._kinds[kind]
        now = asyncio.get_running_loop().time()
        peers = list(state.peers)
        named = ", ".join(peers[:PEERS_NAMED])
        if len(peers) > PEERS_NAMED:
            more = "+" if len(peers) >= PEERS_KEPT else ""
            named += f" and {len(peers) - PEERS_NAMED:,}{more} other addresses"
        state.log.warning("... and %s more %s from %s in the last %.0f s", f"{state.suppressed:,}", kind, named,
                          now - state.since)
        # Still suppressing: the next summary at most one window from now.
        state.since, state.suppressed, state.peers, state.timer = now, 0, {}, None

    def close(self) -> None:
        for state in self._kinds.values():
            if state.timer is not None:
                state.timer.cancel()
        self._kinds.clear()
