"""What the rest of the broker sees of the direct path (``Broker.direct``), without importing it."""

from __future__ import annotations

from typing import Protocol


class DirectPath(Protocol):
    def refresh(self) -> None:
        """Re-derive every consumer slot (after log maintenance: rolls, retention, deletions)."""

    async def stop(self) -> None: ...
