"""Log compaction (placeholder: scheduling only; filled in below)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grete.storage.manager import LogManager


class LogCleaner:
    def __init__(self, manager: LogManager) -> None:
        self.manager = manager

    def schedule(self, now_ms: int) -> None:
        return None

    def stop(self) -> None:
        return None
